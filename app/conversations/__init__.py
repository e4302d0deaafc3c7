"""Conversations, their branches, search, export and import, over storage/."""
