"""The web console's demo data and browser (tests/console/, the README's screenshots)."""
