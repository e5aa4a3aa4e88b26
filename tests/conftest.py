"""Session-wide test setup shared by every test module."""
