"""Narrated classroom scenarios (`kafkasim scenario`) and the demo: steps as data, predictions checked."""
