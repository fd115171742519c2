"""Task registry, data-format loaders and synthetic suites."""
