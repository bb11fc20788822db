"""Rollups into Spark: job masters write each completed epoch as Parquet into a partitioned
rollup lake, and analysts read it from Spark (a Python data source named ``elf``) to join live
rollups with history.
"""
