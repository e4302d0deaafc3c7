"""Tests of the window, driven like a user."""
