-- Entities are system-versioned: an update keeps the prior row in
-- pgmemory.entity_versions with the transaction-time range it was current.

CREATE OR REPLACE FUNCTION pgmemory.entities_keep_version()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.name, OLD.labels, OLD.summary, OLD.attributes)
       IS NOT DISTINCT FROM (NEW.name, NEW.labels, NEW.summary, NEW.attributes) THEN
        RETURN NEW;
    END IF;
    IF OLD.updated_at < now() THEN
        INSERT INTO pgmemory.entity_versions
            (entity_id, group_id, name, labels, summary, attributes, recorded)
        VALUES (OLD.id, OLD.group_id, OLD.name, OLD.labels, OLD.summary, OLD.attributes,
                tstzrange(OLD.updated_at, now()));
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS entities_keep_version ON pgmemory.entities;
CREATE TRIGGER entities_keep_version BEFORE UPDATE ON pgmemory.entities
    FOR EACH ROW EXECUTE FUNCTION pgmemory.entities_keep_version();
