"""The example project's package (Django's ``startproject`` layout): settings only."""
