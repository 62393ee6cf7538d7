-- Runs once, when the container starts with an empty data volume, in database POSTGRES_DB.
-- AGE needs no shared_preload_libraries: clients run LOAD 'age' in each session.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS age;
