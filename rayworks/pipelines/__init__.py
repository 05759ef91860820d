"""One package per method; importing a package registers its pipelines."""
