"""Spark: a PySpark data source and sink, and example pipelines."""
