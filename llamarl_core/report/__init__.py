"""`llamarl report`: pictures and a markdown summary of one or more run directories."""
