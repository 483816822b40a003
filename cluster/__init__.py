"""What a person drives: the kafkasim CLI, process launching, status views and chaos actions."""
