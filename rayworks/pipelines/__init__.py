"""One package per method; importing a package registers its pipelines.

`registry.get_pipeline(name)` imports only the package whose source registers `name`
(found by a text scan for `pipeline("name"`), so register with a literal name; any other
lookup, `rayworks list` and `rayworks demo` import every package.
"""
