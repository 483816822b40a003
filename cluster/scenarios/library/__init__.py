"""The scenarios kafkasim ships, one module each; every module defines ``SCENARIO``."""
