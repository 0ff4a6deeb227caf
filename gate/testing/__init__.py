"""Test doubles that are real programs: an OpenAI-compatible server backed by specguard's own engines."""
