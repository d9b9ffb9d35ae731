"""Harnesses, helpers and scripts the tests share; no tests here."""
