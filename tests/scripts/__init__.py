"""Tests of scripts/ (the reliability report)."""
