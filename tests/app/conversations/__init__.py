"""Tests of app.conversations."""
