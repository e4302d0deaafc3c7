"""Tests of app.chat."""
