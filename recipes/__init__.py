"""Recipe data (YAML). Shipped inside the entrypoint package as ``entrypoint.recipes_data``."""
