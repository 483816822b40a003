"""``kafkasim dashboard``: a live web page of the cluster, with fault buttons."""
