-- The single write of one episode: every decision the pipeline made, applied
-- in one call inside the caller's transaction (so all of it commits or none).

CREATE OR REPLACE FUNCTION pgmemory.apply_episode(p_episode uuid, p_plan jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    g text := p_plan->>'group';
    item jsonb;
BEGIN
    INSERT INTO pgmemory.entities (id, group_id, name, labels, summary, attributes, name_embedding)
    SELECT (e->>'id')::uuid, g, e->>'name',
           ARRAY(SELECT jsonb_array_elements_text(e->'labels')),
           coalesce(e->>'summary', ''), coalesce(e->'attributes', '{}'),
           (e->>'embedding')::vector
      FROM jsonb_array_elements(p_plan->'new_entities') e;

    FOR item IN SELECT * FROM jsonb_array_elements(p_plan->'entity_updates') LOOP
        UPDATE pgmemory.entities
           SET name = coalesce(item->>'name', name),
               labels = ARRAY(SELECT DISTINCT unnest(labels || ARRAY(
                            SELECT jsonb_array_elements_text(coalesce(item->'labels', '[]'))))),
               attributes = attributes || coalesce(item->'attributes', '{}')
         WHERE id = (item->>'id')::uuid AND group_id = g;
    END LOOP;

    INSERT INTO pgmemory.episode_mentions (episode_id, entity_id, group_id)
    SELECT p_episode, m::uuid, g FROM jsonb_array_elements_text(p_plan->'mentions') m
    ON CONFLICT DO NOTHING;

    FOR item IN SELECT * FROM jsonb_array_elements(p_plan->'invalidations') LOOP
        PERFORM pgmemory.invalidate_fact((item->>'id')::uuid, (item->>'at')::timestamptz, p_episode);
    END LOOP;

    FOR item IN SELECT * FROM jsonb_array_elements(p_plan->'retractions') LOOP
        PERFORM pgmemory.retract_fact((item #>> '{}')::uuid);
    END LOOP;

    FOR item IN SELECT * FROM jsonb_array_elements(p_plan->'new_facts') LOOP
        PERFORM pgmemory.record_fact(
            (item->>'id')::uuid, g, (item->>'source')::uuid, (item->>'target')::uuid,
            item->>'relation', item->>'fact',
            (item->>'valid_from')::timestamptz, (item->>'valid_to')::timestamptz,
            (item->>'embedding')::vector, coalesce(item->'attributes', '{}'), p_episode);
    END LOOP;

    INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
    SELECT f::uuid, p_episode, g FROM jsonb_array_elements_text(p_plan->'provenance') f
    ON CONFLICT DO NOTHING;

    PERFORM pgmemory.derive_summaries(ARRAY(
        SELECT m::uuid FROM jsonb_array_elements_text(p_plan->'mentions') m
        UNION
        SELECT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
         WHERE f.id IN (SELECT (i->>'id')::uuid FROM jsonb_array_elements(p_plan->'invalidations') i
                        UNION SELECT (r #>> '{}')::uuid FROM jsonb_array_elements(p_plan->'retractions') r)));

    UPDATE pgmemory.episodes
       SET status = 'done', error = NULL, lease_owner = NULL, lease_until = NULL,
           -- Cost accumulates over attempts (failed ones were billed too);
           -- attempts are counted when an attempt takes its lease (sql/50_queue.sql).
           llm_calls = llm_calls + (p_plan #>> '{usage,calls}')::integer,
           prompt_tokens = prompt_tokens + (p_plan #>> '{usage,prompt_tokens}')::integer,
           completion_tokens = completion_tokens + (p_plan #>> '{usage,completion_tokens}')::integer,
           embedding = (p_plan->>'embedding')::vector
     WHERE id = p_episode;
END
$$;

-- Entity summaries: an entity is described by its latest believed, still-valid
-- facts (the five most recently recorded, as source or target); with none, by
-- its latest believed facts that have ended, each marked "(until <date>)". An
-- entity with no believed facts keeps the description it was created with.
CREATE OR REPLACE FUNCTION pgmemory.derive_summaries(p_entities uuid[])
RETURNS void LANGUAGE sql AS $$
    WITH open_facts AS (
        SELECT ent.id, u.fact, u.rec, u.version_id
          FROM unnest(p_entities) AS ent (id)
          CROSS JOIN LATERAL (
                (SELECT fa.fact, lower(fa.recorded) AS rec, fa.version_id FROM pgmemory.facts fa
                  WHERE fa.source_id = ent.id AND upper_inf(fa.recorded) AND upper_inf(fa.valid)
                  ORDER BY lower(fa.recorded) DESC LIMIT 5)
                UNION ALL
                (SELECT fa.fact, lower(fa.recorded), fa.version_id FROM pgmemory.facts fa
                  WHERE fa.target_id = ent.id AND upper_inf(fa.recorded) AND upper_inf(fa.valid)
                  ORDER BY lower(fa.recorded) DESC LIMIT 5)) u
    ), ended_facts AS (
        SELECT ent.id,
               rtrim(fa.fact, '.') || ' (until ' || to_char(upper(fa.valid) AT TIME ZONE 'UTC', 'YYYY-MM-DD') || ').'
                   AS fact,
               lower(fa.recorded) AS rec, fa.version_id
          FROM unnest(p_entities) AS ent (id)
          JOIN pgmemory.facts fa ON (fa.source_id = ent.id OR fa.target_id = ent.id)
         WHERE upper_inf(fa.recorded) AND NOT upper_inf(fa.valid)
           AND NOT EXISTS (SELECT 1 FROM open_facts o WHERE o.id = ent.id)
    ), ranked AS (
        SELECT id, fact, row_number() OVER (PARTITION BY id ORDER BY rec DESC, version_id DESC) AS n
          FROM (SELECT * FROM open_facts UNION ALL SELECT * FROM ended_facts) f
    ), summaries AS (
        SELECT id, string_agg(fact, ' ' ORDER BY n) AS summary FROM ranked WHERE n <= 5 GROUP BY id
    )
    UPDATE pgmemory.entities e
       SET summary = s.summary
      FROM summaries s
     WHERE e.id = s.id AND e.summary IS DISTINCT FROM s.summary
$$;
