"""The pure core: settings, recipe data, selection, composition and the plan. No I/O beyond reading
the recipe data and the KIMI_CONFIG file; imports nothing outside this package."""
