"""Tests of app/, one folder per package."""
