"""Migration revisions."""
