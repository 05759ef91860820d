from rayworks.cli import main

raise SystemExit(main())
