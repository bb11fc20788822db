"""The columnar ingest path: chunks of whole lines to Arrow tables (docs/ingest.md)."""
