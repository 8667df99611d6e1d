"""The curated schema, shipped inside the package so containers have it too."""
import os

SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.pbtxt")
