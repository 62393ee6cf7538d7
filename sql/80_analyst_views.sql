-- Analyst views: the bi-temporal store with names and readable time bounds,
-- no embeddings, no tsvectors. `valid` (T, world time) and `recorded` (T',
-- transaction time) stay as ranges so plain range predicates work and
-- `pgmemory sql` can rewrite FOR SYSTEM_TIME / FOR VALID_TIME clauses onto
-- them (pgmemory/analyst/period.py). Unknown bounds are NULL; a start of
-- '-infinity' means "since forever"; a NULL end means "still open".

-- The name entity p_entity of group p_group had at transaction time p_at, if a kept version
-- (entity_versions) held it; NULL if its current row did. An entity's versions do not overlap:
-- the one that started last at or before p_at is read backwards on the primary key.
CREATE OR REPLACE FUNCTION pgmemory_internal.entity_name_at(p_group text, p_entity uuid, p_at timestamptz)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT (SELECT CASE WHEN v.recorded @> p_at THEN v.name END FROM pgmemory.entity_versions v
             WHERE v.group_id = p_group AND v.entity_id = p_entity
               AND v.recorded < tstzrange(p_at, NULL, '()')  -- started at or before p_at
             ORDER BY v.recorded DESC LIMIT 1)
$$;

-- Every version of every fact, oldest belief first when ordered by recorded_from. Its episodes are
-- those it cited when last believed (a superseded version: those linked before, and not retracted
-- by, its end; the believed one: all but the retracted), so FOR SYSTEM_TIME AS OF T' cites as T'
-- did, as search(known_at => T') does, but for a link made or retracted while one version stayed
-- believed (a repeat that changed nothing, a delete that left it as it was). Its endpoints
-- are named as they were when the version was recorded, like its sentence, so FOR SYSTEM_TIME AS
-- OF T' names them as entity_history, entities_at and search(known_at => T') do (unless one was
-- renamed between the version's recording and T'); believed_facts and current_facts use today's
-- names. Only entities marked `renamed` (a name change, sql/20_entity_versions.sql) have a past
-- name to look up: facts between two never-renamed entities (nearly all) keep plain joined names,
-- so count(*) and a filter on source or target cost what they did; the other two branches start
-- from the group's few renamed entities (index entities_renamed).
CREATE OR REPLACE VIEW pgmemory.fact_versions AS
SELECT f.id, f.version_id, f.group_id, s.name AS source, f.relation, t.name AS target, f.fact,
       lower(f.valid) AS valid_from, upper(f.valid) AS valid_to, lower_inf(f.valid) AS valid_from_unknown,
       lower(f.recorded) AS recorded_from, upper(f.recorded) AS recorded_to,
       upper_inf(f.recorded) AS believed, f.is_event, f.valid, f.recorded, f.attributes,
       ARRAY(SELECT fe.episode_id FROM pgmemory.fact_episodes fe  -- (cited when last believed)
              WHERE fe.group_id = f.group_id AND fe.fact_id = f.id
                AND fe.created_at < coalesce(upper(f.recorded), 'infinity')
                AND (fe.retracted_at IS NULL OR fe.retracted_at >= coalesce(upper(f.recorded), 'infinity'))
              ORDER BY fe.created_at, fe.episode_id) AS episodes,
       f.source_id, f.target_id, f.lineage
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE NOT s.renamed AND NOT t.renamed
UNION ALL
SELECT f.id, f.version_id, f.group_id,
       coalesce(pgmemory_internal.entity_name_at(f.group_id, f.source_id, lower(f.recorded)), s.name) AS source,
       f.relation,
       CASE WHEN t.renamed THEN coalesce(pgmemory_internal.entity_name_at(f.group_id, f.target_id, lower(f.recorded)),
                                         t.name)
            ELSE t.name END AS target, f.fact,
       lower(f.valid) AS valid_from, upper(f.valid) AS valid_to, lower_inf(f.valid) AS valid_from_unknown,
       lower(f.recorded) AS recorded_from, upper(f.recorded) AS recorded_to,
       upper_inf(f.recorded) AS believed, f.is_event, f.valid, f.recorded, f.attributes,
       ARRAY(SELECT fe.episode_id FROM pgmemory.fact_episodes fe  -- (cited when last believed)
              WHERE fe.group_id = f.group_id AND fe.fact_id = f.id
                AND fe.created_at < coalesce(upper(f.recorded), 'infinity')
                AND (fe.retracted_at IS NULL OR fe.retracted_at >= coalesce(upper(f.recorded), 'infinity'))
              ORDER BY fe.created_at, fe.episode_id) AS episodes,
       f.source_id, f.target_id, f.lineage
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE s.renamed
UNION ALL
SELECT f.id, f.version_id, f.group_id, s.name AS source, f.relation,
       coalesce(pgmemory_internal.entity_name_at(f.group_id, f.target_id, lower(f.recorded)), t.name) AS target, f.fact,
       lower(f.valid) AS valid_from, upper(f.valid) AS valid_to, lower_inf(f.valid) AS valid_from_unknown,
       lower(f.recorded) AS recorded_from, upper(f.recorded) AS recorded_to,
       upper_inf(f.recorded) AS believed, f.is_event, f.valid, f.recorded, f.attributes,
       ARRAY(SELECT fe.episode_id FROM pgmemory.fact_episodes fe  -- (cited when last believed)
              WHERE fe.group_id = f.group_id AND fe.fact_id = f.id
                AND fe.created_at < coalesce(upper(f.recorded), 'infinity')
                AND (fe.retracted_at IS NULL OR fe.retracted_at >= coalesce(upper(f.recorded), 'infinity'))
              ORDER BY fe.created_at, fe.episode_id) AS episodes,
       f.source_id, f.target_id, f.lineage
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE NOT s.renamed AND t.renamed;

-- What we believe now about any time: the believed version of every fact,
-- ended ones included (valid_to says when they ended).
CREATE OR REPLACE VIEW pgmemory.believed_facts AS
SELECT f.id, f.group_id, s.name AS source, f.relation, t.name AS target, f.fact,
       lower(f.valid) AS valid_from, upper(f.valid) AS valid_to,
       lower_inf(f.valid) AS valid_from_unknown,
       lower(f.recorded) AS recorded_at, f.attributes, f.is_event, f.valid, f.recorded
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE upper_inf(f.recorded);

-- What is true now, as we know it now (pgmemory.holds_at: a state valid now, or
-- an event that has happened): facts that already ended are not in it.
CREATE OR REPLACE VIEW pgmemory.current_facts AS
SELECT f.id, f.group_id, s.name AS source, f.relation, t.name AS target, f.fact,
       lower(f.valid) AS valid_from, upper(f.valid) AS valid_to,
       lower_inf(f.valid) AS valid_from_unknown,
       lower(f.recorded) AS recorded_at, f.attributes
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE upper_inf(f.recorded) AND pgmemory.holds_at(f.valid, f.is_event, now());

-- Every recorded version of every entity (name, labels, stored summary), the
-- current one with an open `recorded` range.
CREATE OR REPLACE VIEW pgmemory.entity_history AS
SELECT e.id, e.group_id, e.name, e.labels, e.summary, e.attributes,
       e.updated_at AS recorded_from, e.retired_at AS recorded_to, e.retired_at IS NULL AS current,
       tstzrange(e.updated_at, e.retired_at) AS recorded
  FROM pgmemory.entities e
UNION ALL
SELECT v.entity_id, v.group_id, v.name, v.labels, v.summary, v.attributes,
       lower(v.recorded), upper(v.recorded), false, v.recorded
  FROM pgmemory.entity_versions v;

-- Episodes as said: who, when (said_at: the reference time; said_offset: the speaker's UTC
-- offset, NULL: UTC), when ingested, status (current episodes: a retracted one, kept as
-- history, is left out).
CREATE OR REPLACE VIEW pgmemory.episode_log AS
SELECT e.id, e.group_id, e.kind, e.actor, e.content, e.source_description, e.valid_at AS said_at,
       e.recorded_at, e.status, e.error, e.llm_calls, e.prompt_tokens, e.completion_tokens,
       e.reference_offset AS said_offset
  FROM pgmemory.episodes e
 WHERE e.retracted_at IS NULL;

-- Which episode mentions which entity, by name.
CREATE OR REPLACE VIEW pgmemory.entity_mentions AS
SELECT m.group_id, m.episode_id, m.entity_id, n.name AS entity, ep.actor, ep.valid_at AS said_at
  FROM pgmemory.episode_mentions m
  JOIN pgmemory.entities n ON n.group_id = m.group_id AND n.id = m.entity_id
  JOIN pgmemory.episodes ep ON ep.group_id = m.group_id AND ep.id = m.episode_id;

-- Entities of a group as of valid time p_valid_at (T; NULL: now) as believed at
-- p_known_at (T'; NULL: now): entities recorded by T', their name and labels as
-- recorded then, and a summary made of the facts of that slice (the five that
-- started last before T; '' when none), with the number of slice facts. The versions are pinned
-- to p_group itself: Citus routes the lateral subquery (LIMIT 1) only then, not through
-- `ev.group_id = e.group_id` ("cannot push down this subquery" on a cluster).
CREATE OR REPLACE FUNCTION pgmemory.entities_at(
    p_group text, p_valid_at timestamptz DEFAULT NULL, p_known_at timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, group_id text, name text, labels text[], summary text, facts bigint)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.group_id, coalesce(v.name, e.name), coalesce(v.labels, e.labels), s.summary,
           (SELECT count(*) FROM pgmemory_internal.slice_facts_of(e.group_id, e.id, coalesce(p_valid_at, now()), p_known_at))
      FROM pgmemory.entities e
      LEFT JOIN LATERAL (SELECT ev.name, ev.labels FROM pgmemory.entity_versions ev
                          WHERE p_known_at IS NOT NULL AND ev.group_id = p_group AND ev.entity_id = e.id
                            AND ev.recorded @> p_known_at
                          LIMIT 1) v ON true
     CROSS JOIN LATERAL pgmemory_internal.entity_summary_at(e.group_id, e.id, coalesce(p_valid_at, now()), p_known_at) s
     WHERE e.group_id = p_group AND (p_known_at IS NULL OR e.created_at <= p_known_at)
       AND (e.retired_at IS NULL OR e.retired_at > p_known_at)  -- retired by a retract (sql/60_delete.sql)
$$;

-- Every version of one entity of one group, oldest first: the entity named p_name now or, when
-- none is, the entity (or entities) that had that name in a recorded version (renamed since, by
-- a later episode or by deleting the episode that named it so).
CREATE OR REPLACE FUNCTION pgmemory.entity_versions_of(p_group text, p_name text)
RETURNS SETOF pgmemory.entity_history LANGUAGE sql STABLE AS $$
    WITH now_named AS (
        SELECT e.id FROM pgmemory.entities e
         WHERE e.group_id = p_group AND lower(e.name) = lower(p_name)
    ), once_named AS (
        SELECT v.entity_id AS id FROM pgmemory.entity_versions v
         WHERE v.group_id = p_group AND lower(v.name) = lower(p_name)
           AND NOT EXISTS (SELECT FROM now_named)
    )
    SELECT * FROM pgmemory.entity_history h
     WHERE h.group_id = p_group AND h.id IN (SELECT id FROM now_named UNION SELECT id FROM once_named)
     ORDER BY h.recorded_from
$$;
