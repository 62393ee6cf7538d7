-- Internal helpers move to schema pgmemory_internal, so that `\df pgmemory.*` lists the public
-- SQL API only (docs/sql.md). Existing functions are moved, not dropped: triggers, policies and
-- views that use them keep working, and init's sql/ run then replaces them in their new schema.
-- On a fresh database nothing is there to move.
CREATE SCHEMA IF NOT EXISTS pgmemory_internal;

DO $move$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.oid::regprocedure AS signature FROM pg_proc p
         WHERE p.pronamespace = 'pgmemory'::regnamespace
           AND p.proname = ANY (ARRAY[
    'add_community_usage', 'add_text_stats', 'apply_claim', 'apply_episode', 'apply_if_unchanged',
    'bm25_term', 'bm25_terms', 'claim_component', 'claim_episode', 'claims_summary',
    'communities_after_delete', 'community_digests', 'community_graph', 'contradiction_candidates',
    'delete_entities', 'derive_summaries', 'end_attempt', 'entities_keep_version',
    'entity_by_name', 'entity_candidates', 'entity_summary_at', 'entity_text_hits',
    'entity_text_hits_as_of', 'episode_node', 'episode_text_hits', 'episode_uuid', 'erase_history',
    'erase_retracted', 'fact_candidates', 'fact_in_slice', 'fact_in_slice_unindexed',
    'fact_in_view', 'fact_text_hits', 'granted_groups', 'graph_drop_edge', 'graph_drop_vertex',
    'graph_put_edge', 'graph_put_vertex', 'graph_time', 'group_version', 'hit_matches_metadata',
    'lease_episode', 'mirror_community', 'mirror_community_row', 'mirror_entity',
    'mirror_entity_row', 'mirror_episode', 'mirror_episode_row', 'mirror_fact', 'mirror_fact_row',
    'mirror_member_row', 'mirror_members_added', 'mirror_members_gone', 'mirror_mention',
    'mirror_mention_row', 'or_tsquery', 'rebuild_graph_mirror', 'refold_entities',
    'refold_lineages', 'renew_lease', 'requested_groups', 'require_group_entities',
    'set_embedding_dim', 'setting', 'sha1', 'slice_facts_of', 'track_text_stats', 'tsv_length',
    'update_communities', 'uuid5', 'valid_range', 'visible_groups', 'write_community_summary'
           ])
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA pgmemory_internal', r.signature);
    END LOOP;
END
$move$;
