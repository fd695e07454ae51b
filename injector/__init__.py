"""The configuration injector (``tether injector``): a Watch's records into its target CR."""
