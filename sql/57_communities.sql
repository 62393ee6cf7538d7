-- Communities (the paper's third tier): label propagation over the entity
-- graph of currently believed, currently holding facts, in SQL; dynamic
-- assignment of new entities on ingest; what a refresh needs to name and
-- summarise a community. Every query pins group_id = the group.

-- The weighted entity graph of a group now: one row per unordered pair with the
-- number of believed facts that hold now between them (events once happened count).
CREATE OR REPLACE FUNCTION pgmemory_internal.community_graph(p_group text)
RETURNS TABLE (a uuid, b uuid, w integer) LANGUAGE sql STABLE AS $$
    SELECT least(f.source_id, f.target_id), greatest(f.source_id, f.target_id), count(*)::integer
      FROM pgmemory.facts f
     WHERE f.group_id = p_group AND upper_inf(f.recorded)
       AND pgmemory.holds_at(f.valid, f.is_event, now())
     GROUP BY 1, 2
$$;

-- Full detection: label propagation (Raghavan et al.) with a modularity penalty,
-- multilevel (as in Louvain) so that only the first iterations read the whole
-- edge list. Every entity starts with its own label. In an iteration, the four
-- quarters of the nodes (by a hash of their number) take in turn the label of
-- largest total edge weight among their neighbours minus the modularity
-- penalty, keeping their own label when it is among the best (so the result
-- settles), other ties broken by a hash of (node, label): deterministic, and
-- without the min-label bias that floods one label everywhere.
-- Levels: 0 = the entities, two iterations (labels are then small dense
-- fragments); the graph is contracted (a node per label, edge weights summed);
-- 1 = propagation among the fragments until it settles; contracted again;
-- then rounds of merges of community pairs that are each other's best
-- modularity gain (LPAm+: propagation alone stops in local optima that split
-- a dense group), each contracted, while merges happen (at most 10 rounds).
-- Nodes are numbered by entity name (byte order, then id among entities of the
-- same name), so that every tie above is broken by content: the same facts
-- loaded into two groups or databases (entity ids are random) give the same
-- communities. Labels, degrees and label volumes live in arrays indexed
-- by number (one statement per phase reads them as parameters, no joins and no
-- row updates). At most p_max_iterations propagation iterations in all.
-- Labels shared by two or more entities become the group's communities: the
-- current ones are ended (kept as versions with their members) unless one has
-- exactly the same members, which stays as it is (name and summary kept).
-- Under the group lock, one transaction. Returns counts and its own timings.
CREATE OR REPLACE FUNCTION pgmemory.detect_communities(p_group text, p_max_iterations integer DEFAULT 30,
                                                       p_resolution float8 DEFAULT 1.0)
RETURNS jsonb LANGUAGE plpgsql
SET work_mem = '64MB'  -- per-phase aggregates over the whole edge list stay in memory
AS $$
DECLARE
    -- One propagation phase: the nodes whose edges are in %1$I take their best label; returns
    -- the nodes that move and their new labels. $1 = resolution, $2 = 2m, $3 = label per node,
    -- $4 = degree per node, $5 = volume (sum of degrees) per label.
    pass_sql constant text := $q$
        SELECT coalesce(array_agg(b.src), '{}'), coalesce(array_agg(b.label), '{}')
          FROM (SELECT DISTINCT ON (x.src) x.src, x.label,
                       x.w - $1 * $4[x.src] * ($5[x.label] - CASE WHEN x.label = $3[x.src] THEN $4[x.src] ELSE 0 END) / $2
                       + CASE WHEN x.label = $3[x.src] THEN 1e-9 ELSE 0 END AS q  -- own label wins a tie
                  FROM (SELECT e.src, $3[e.dst] AS label, sum(e.w) AS w FROM %1$I e GROUP BY 1, 2) x
                 ORDER BY x.src, 3 DESC, hashint8((x.src::bigint << 32) | x.label::bigint), x.label) b
         -- staying is always a choice, also where no neighbour holds the own label
         WHERE b.label <> $3[b.src] AND b.q > 1e-9 - $1 * $4[b.src] * ($5[$3[b.src]] - $4[b.src]) / $2
    $q$;
    -- The edges of one phase's nodes (a hash of the node and level): a phase reads only its own.
    split_sql constant text := 'DROP TABLE IF EXISTS pg_temp.%1$I; CREATE TEMP TABLE %1$I ON COMMIT DROP AS'
                               ' SELECT src, dst, w FROM lv_edge WHERE hashint4(src + %2$s) & 3 = %3$s';
    -- Propagation iterations per level (the last: until it settles), then merge rounds.
    level_iterations constant integer[] := '{2,10}';
    lpa_levels integer := cardinality(level_iterations);
    lab integer[];      -- node -> label, at the current level
    deg float8[];       -- node -> weighted degree (at levels above 0: the volume of its entities)
    vol float8[];       -- label -> sum of its nodes' degrees
    comm integer[];     -- entity -> its node at the current level
    ident integer[];
    mv_node integer[];
    mv_label integer[];
    v_i integer;
    v_node integer;
    v_label integer;
    two_m float8;
    merged integer := 0;
    merges integer := 0;
    lvl integer := 0;
    lvl_it integer;
    lvl_moved integer;
    lvl_nodes integer;
    moved_total integer := 0;
    last_moved integer;
    lvl_settled boolean;
    settled boolean := true;
    t0 timestamptz := clock_timestamp();
    t_setup float8;
    t_prop float8 := 0;
    t_merge float8 := 0;
    t_contract float8 := 0;
    t1 timestamptz;
    moves integer[] := '{}';
    sizes integer[] := '{}';
    kept uuid[];
    new_ids uuid[];
    new_names text[];
    central_ids uuid[];
    central_names text[];
    member_of uuid[];
    member_ids uuid[];
    n_nodes integer;
    it integer := 0;
    ph integer;
    n_kept integer;
    n_new integer;
    n_ended integer;
    n_members integer;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    IF p_group IS NULL THEN
        RAISE EXCEPTION 'group_id must be a non-empty string' USING ERRCODE = '22023';
    END IF;
    IF p_max_iterations IS NULL OR p_max_iterations < 1 OR p_max_iterations > 1000 THEN
        RAISE EXCEPTION 'max_iterations must be between 1 and 1000, got %', p_max_iterations USING ERRCODE = '22023';
    END IF;
    IF p_resolution IS NULL OR NOT p_resolution BETWEEN 0 AND 100 THEN
        RAISE EXCEPTION 'resolution must be between 0 and 100, got %', p_resolution USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.lock_group(p_group);
    DROP TABLE IF EXISTS pg_temp.lp_pair, pg_temp.lp_name, pg_temp.lp_node, pg_temp.lv_edge, pg_temp.lv_next_edge;
    CREATE TEMP TABLE lp_pair ON COMMIT DROP AS SELECT * FROM pgmemory_internal.community_graph(p_group);
    -- The group's entity names (a temporary table: on Citus none joins a distributed one).
    CREATE TEMP TABLE lp_name ON COMMIT DROP AS
        SELECT e.id, e.name FROM pgmemory.entities e WHERE e.group_id = p_group;
    -- Entities numbered 1..N by name (byte order: the same in every database), then id
    -- (only among entities of the same name), with their weighted degree and name.
    CREATE TEMP TABLE lp_node ON COMMIT DROP AS
        SELECT row_number() OVER (ORDER BY x.name COLLATE "C", y.id)::integer AS n, y.id, sum(y.w)::float8 AS degree,
               x.name
          FROM (SELECT a AS id, w FROM lp_pair UNION ALL SELECT b, w FROM lp_pair) y
          LEFT JOIN lp_name x ON x.id = y.id
         GROUP BY y.id, x.name;
    ANALYZE lp_node;  -- without statistics the join below is planned as two merge joins (sorts of 92k uuids at 100k facts)
    -- Both directions of every pair, by number.
    CREATE TEMP TABLE lv_edge ON COMMIT DROP AS
        SELECT s.n AS src, t.n AS dst, p.w::float8 AS w
          FROM lp_pair p JOIN lp_node s ON s.id = p.a JOIN lp_node t ON t.id = p.b;
    INSERT INTO lv_edge SELECT dst, src, w FROM lv_edge;
    deg := ARRAY(SELECT degree FROM lp_node ORDER BY n);
    n_nodes := cardinality(deg);
    two_m := greatest((SELECT sum(d) FROM unnest(deg) AS d), 1);
    ident := ARRAY(SELECT generate_series(1, n_nodes));
    lab := ident;
    vol := deg;
    comm := ident;
    lvl_nodes := n_nodes;
    t_setup := extract(epoch FROM clock_timestamp() - t0) * 1000;

    LOOP
        sizes := sizes || lvl_nodes;
        lvl_moved := 0;
        IF lvl < lpa_levels THEN
            -- Propagation: at level 0 two iterations, at level 1 until it settles.
            t1 := clock_timestamp();
            FOR ph IN 0 .. 3 LOOP
                EXECUTE format(split_sql, 'lv_edge_' || ph, lvl, ph);
            END LOOP;
            lvl_it := 0;
            last_moved := NULL;
            lvl_settled := false;
            LOOP
                EXIT WHEN it >= p_max_iterations OR lvl_it >= level_iterations[lvl + 1];
                it := it + 1;
                lvl_it := lvl_it + 1;
                moved_total := 0;
                FOR ph IN 0 .. 3 LOOP
                    EXECUTE format(pass_sql, 'lv_edge_' || ph) INTO mv_node, mv_label
                      USING p_resolution, two_m, lab, deg, vol;
                    FOR v_i IN 1 .. cardinality(mv_node) LOOP
                        v_node := mv_node[v_i];
                        v_label := mv_label[v_i];
                        vol[lab[v_node]] := vol[lab[v_node]] - deg[v_node];
                        vol[v_label] := vol[v_label] + deg[v_node];
                        lab[v_node] := v_label;
                    END LOOP;
                    moved_total := moved_total + cardinality(mv_node);
                END LOOP;
                moves := moves || moved_total;
                lvl_moved := lvl_moved + moved_total;
                -- Settled: at most one node in fifty moves (the merge rounds finish the rest), or
                -- (at level 1) the moves stopped falling: nodes of one phase swapping labels.
                IF moved_total <= lvl_nodes / 50 OR (lvl > 0 AND moved_total >= last_moved) THEN
                    lvl_settled := true;
                    EXIT;
                END IF;
                last_moved := moved_total;
            END LOOP;
            IF lvl = lpa_levels - 1 AND NOT lvl_settled THEN
                settled := false;
            END IF;
            t_prop := t_prop + extract(epoch FROM clock_timestamp() - t1) * 1000;
        ELSE
            -- A merge round on the contracted graph (a node per community): pairs that are
            -- each other's best modularity gain merge into the smaller number.
            t1 := clock_timestamp();
            SELECT coalesce(array_agg(m.gone), '{}'), coalesce(array_agg(m.keep), '{}') INTO mv_node, mv_label
              FROM (WITH best AS (
                        SELECT DISTINCT ON (e.src) e.src AS la, e.dst AS lb
                          FROM lv_edge e
                         WHERE e.w - p_resolution * deg[e.src] * deg[e.dst] / two_m > 0
                         ORDER BY e.src, e.w - p_resolution * deg[e.src] * deg[e.dst] / two_m DESC, e.dst)
                    SELECT b1.la AS keep, b1.lb AS gone FROM best b1 JOIN best b2 ON b2.la = b1.lb AND b2.lb = b1.la
                     WHERE b1.la < b1.lb) m;
            FOR v_i IN 1 .. cardinality(mv_node) LOOP
                lab[mv_node[v_i]] := mv_label[v_i];
                vol[mv_label[v_i]] := vol[mv_label[v_i]] + vol[mv_node[v_i]];
                vol[mv_node[v_i]] := 0;
            END LOOP;
            merged := cardinality(mv_node);
            merges := merges + 1;
            lvl_moved := merged;
            t_merge := t_merge + extract(epoch FROM clock_timestamp() - t1) * 1000;
        END IF;
        EXIT WHEN lvl >= lpa_levels AND (merged = 0 OR merges >= 10);
        IF lvl_moved > 0 THEN
            -- Contraction: a node per label (numbered as the label), weights summed; a node's
            -- degree is its label's volume.
            t1 := clock_timestamp();
            CREATE TEMP TABLE lv_next_edge ON COMMIT DROP AS
                SELECT lab[e.src] AS src, lab[e.dst] AS dst, sum(e.w) AS w
                  FROM lv_edge e WHERE lab[e.src] <> lab[e.dst] GROUP BY 1, 2;
            DROP TABLE lv_edge;
            ALTER TABLE lv_next_edge RENAME TO lv_edge;
            comm := ARRAY(SELECT lab[u.c] FROM unnest(comm) WITH ORDINALITY AS u (c, o) ORDER BY u.o);
            lvl_nodes := (SELECT count(*) FROM unnest(vol) AS v WHERE v > 0);
            deg := vol;
            lab := ident;
            t_contract := t_contract + extract(epoch FROM clock_timestamp() - t1) * 1000;
        END IF;
        lvl := lvl + 1;
    END LOOP;
    -- The last merges, not contracted.
    comm := ARRAY(SELECT lab[u.c] FROM unnest(comm) WITH ORDINALITY AS u (c, o) ORDER BY u.o);

    -- Communities found: labels held by two or more entities; centrality = weighted degree
    -- (ties: by node number, i.e. by name).
    t1 := clock_timestamp();
    DROP TABLE IF EXISTS pg_temp.lp_found;
    CREATE TEMP TABLE lp_found ON COMMIT DROP AS
        SELECT comm[p.n] AS label, array_agg(p.id ORDER BY p.id) AS members,
               (array_agg(p.id ORDER BY p.degree DESC, p.n))[1:3] AS central
          FROM lp_node p GROUP BY 1 HAVING count(*) >= 2;
    -- A current community with exactly the same members stays (its name and summary
    -- still describe it); the other current ones end, with their memberships.
    ALTER TABLE lp_found ADD COLUMN keep uuid, ADD COLUMN id uuid;
    UPDATE lp_found f SET keep = c.community_id
      FROM (SELECT m.community_id, array_agg(m.entity_id ORDER BY m.entity_id) AS members
              FROM pgmemory.community_members m
             WHERE m.group_id = p_group AND m.ended_at IS NULL
             GROUP BY m.community_id) c
     WHERE c.members = f.members;
    UPDATE lp_found SET id = coalesce(keep, gen_random_uuid());
    -- The writes below take arrays, not the temporary tables (Citus plans no join of a
    -- distributed table with a local one).
    kept := ARRAY(SELECT keep FROM lp_found WHERE keep IS NOT NULL);
    UPDATE pgmemory.community_members m SET how = 'detected'
     WHERE m.group_id = p_group AND m.ended_at IS NULL AND m.community_id = ANY (kept) AND m.how <> 'detected';
    UPDATE pgmemory.community_members m SET ended_at = now()
     WHERE m.group_id = p_group AND m.ended_at IS NULL AND NOT m.community_id = ANY (kept);
    UPDATE pgmemory.communities c SET ended_at = now()
     WHERE c.group_id = p_group AND c.ended_at IS NULL AND NOT c.id = ANY (kept);
    GET DIAGNOSTICS n_ended = ROW_COUNT;

    -- New communities, named (until a refresh) after their most central entities (read by
    -- id list: on Citus a temporary table joins no distributed one).
    central_ids := ARRAY(SELECT DISTINCT c FROM lp_found f, unnest(f.central) AS c WHERE f.keep IS NULL);
    SELECT coalesce(array_agg(e.id), '{}'), coalesce(array_agg(e.name), '{}') INTO central_ids, central_names
      FROM pgmemory.entities e WHERE e.group_id = p_group AND e.id = ANY (central_ids);
    SELECT coalesce(array_agg(f.id), '{}'),
           coalesce(array_agg((SELECT string_agg(e.name, ', ' ORDER BY x.ord)
                                 FROM unnest(f.central) WITH ORDINALITY AS x (id, ord)
                                 JOIN unnest(central_ids, central_names) AS e (id, name) ON e.id = x.id)), '{}')
      INTO new_ids, new_names
      FROM lp_found f WHERE f.keep IS NULL;
    -- (Both through the group's 'write' row of group_locks, held since lock_group above, the group
    -- taken from it: pushed down to the group's shards also when this runs on the coordinator, in a
    -- server request's transaction; with no table read Citus copied the rows there, which
    -- row-level security refuses.)
    INSERT INTO pgmemory.communities (id, group_id, name)
    SELECT x.id, gl.group_id, x.name FROM pgmemory.group_locks gl CROSS JOIN unnest(new_ids, new_names) AS x (id, name)
     WHERE gl.group_id = p_group AND gl.purpose = 'write';
    GET DIAGNOSTICS n_new = ROW_COUNT;
    SELECT coalesce(array_agg(f.id), '{}'), coalesce(array_agg(m), '{}') INTO member_of, member_ids
      FROM lp_found f, unnest(f.members) AS m WHERE f.keep IS NULL;
    INSERT INTO pgmemory.community_members (community_id, entity_id, group_id, how)
    SELECT x.c, x.e, gl.group_id, 'detected' FROM pgmemory.group_locks gl CROSS JOIN unnest(member_of, member_ids) AS x (c, e)
     WHERE gl.group_id = p_group AND gl.purpose = 'write';
    n_kept := (SELECT count(*) FROM lp_found WHERE keep IS NOT NULL);
    n_members := (SELECT coalesce(sum(cardinality(members)), 0) FROM lp_found);

    INSERT INTO pgmemory.community_state AS s (group_id, detected_at, members_at_detection, drift)
    VALUES (p_group, now(), n_members, 0)
    ON CONFLICT (group_id) DO UPDATE
        SET detected_at = excluded.detected_at, members_at_detection = excluded.members_at_detection, drift = 0;
    RETURN jsonb_build_object('communities', n_new + n_kept, 'created', n_new, 'kept', n_kept,
                              'ended', n_ended, 'members', n_members, 'entities', n_nodes,
                              'iterations', it, 'merge_rounds', merges,
                              'converged', settled AND merged = 0,
                              'moves', to_jsonb(moves), 'levels', to_jsonb(sizes),
                              'ms', jsonb_build_object('setup', round(t_setup), 'propagation', round(t_prop),
                                                       'merges', round(t_merge), 'contractions', round(t_contract),
                                                       'writes', round(extract(epoch FROM clock_timestamp() - t1) * 1000),
                                                       'total', round(extract(epoch FROM clock_timestamp() - t0) * 1000)));
END
$$;

-- The incremental step's other half: each of p_entities whose current community holds no
-- fact of it believed and holding now with another current member (its facts there ended,
-- were retracted or deleted) leaves it: the membership ends (kept as history), the community
-- is marked for a summary refresh and the drift grows by one, so that communities_due asks
-- for a re-detection when enough of a group's communities no longer describe its facts. A
-- community left with fewer than two current members ends. Returns the departures.
CREATE OR REPLACE FUNCTION pgmemory_internal.community_departures(p_group text, p_entities uuid[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    gone uuid[];
    left_from uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    -- Index probes per entity (an episode touches a handful): its membership, then its facts
    -- until one has its other end in the same community.
    SELECT coalesce(array_agg(m.entity_id), '{}'), coalesce(array_agg(DISTINCT m.community_id), '{}')
      INTO gone, left_from
      FROM (SELECT DISTINCT x FROM unnest(p_entities) AS x) e (id)
      JOIN pgmemory.community_members m ON m.group_id = p_group AND m.entity_id = e.id AND m.ended_at IS NULL
     WHERE NOT EXISTS (SELECT 1 FROM pgmemory.facts f
                        JOIN pgmemory.community_members o
                          ON o.group_id = p_group AND o.entity_id = f.target_id AND o.ended_at IS NULL
                         AND o.community_id = m.community_id
                       WHERE f.group_id = p_group AND f.source_id = e.id AND f.target_id <> e.id
                         AND upper_inf(f.recorded) AND pgmemory.holds_at(f.valid, f.is_event, now()))
       AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f
                        JOIN pgmemory.community_members o
                          ON o.group_id = p_group AND o.entity_id = f.source_id AND o.ended_at IS NULL
                         AND o.community_id = m.community_id
                       WHERE f.group_id = p_group AND f.target_id = e.id AND f.source_id <> e.id
                         AND upper_inf(f.recorded) AND pgmemory.holds_at(f.valid, f.is_event, now()));
    IF cardinality(gone) = 0 THEN
        RETURN 0;
    END IF;
    UPDATE pgmemory.community_members m SET ended_at = now()
     WHERE m.group_id = p_group AND m.ended_at IS NULL AND m.entity_id = ANY (gone);
    UPDATE pgmemory.communities c SET revision = c.revision + 1, updated_at = now()
     WHERE c.group_id = p_group AND c.ended_at IS NULL AND c.id = ANY (left_from);
    -- A community with one member left describes no connection any more: it ends, with it.
    left_from := ARRAY(SELECT c FROM unnest(left_from) AS c
                        WHERE (SELECT count(*) FROM pgmemory.community_members x
                                WHERE x.group_id = p_group AND x.community_id = c AND x.ended_at IS NULL) < 2);
    UPDATE pgmemory.community_members m SET ended_at = now()
     WHERE m.group_id = p_group AND m.ended_at IS NULL AND m.community_id = ANY (left_from);
    UPDATE pgmemory.communities c SET ended_at = now()
     WHERE c.group_id = p_group AND c.ended_at IS NULL AND c.id = ANY (left_from);
    INSERT INTO pgmemory.community_state AS s (group_id, drift) VALUES (p_group, cardinality(gone))
    ON CONFLICT (group_id) DO UPDATE SET drift = s.drift + excluded.drift;
    RETURN cardinality(gone);
END
$$;

-- Dynamic update inside apply_episode (the paper's incremental step). Each of
-- p_entities without a current community joins the current community held by
-- the plurality of its neighbours over facts believed and holding now
-- (weighted by the number of such facts; ties: the larger community, then the
-- one whose first member name, in byte order, comes first, then the smaller id). The drift counter grows by the members that joined and by the
-- new entities (p_new) that have facts but found no community to join. The
-- current communities of p_changed (entities whose facts changed) and of
-- the entities that joined are marked for a summary refresh (revision + 1).
-- p_ended: the entities with a fact that ended or was withdrawn by this write (NULL: any of
-- p_changed), the only members that may leave their community (community_departures): a write
-- that only adds facts checks none.
DROP FUNCTION IF EXISTS pgmemory_internal.update_communities(text, uuid[], uuid[], uuid[]);
CREATE OR REPLACE FUNCTION pgmemory_internal.update_communities(p_group text, p_entities uuid[], p_new uuid[],
                                                       p_changed uuid[], p_ended uuid[] DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    e uuid;
    best uuid;
    joined uuid[] := '{}';
    stranded integer := 0;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    -- Members whose facts inside their community no longer hold leave it first (they may join
    -- another below, as entities without a community).
    IF cardinality(coalesce(p_ended, p_changed)) > 0 THEN
        PERFORM pgmemory_internal.community_departures(p_group, coalesce(p_ended, p_changed));
    END IF;
    -- No current membership in the group (communities never detected): no neighbour can be
    -- joined, and only the count of stranded new entities changes. Skipping the neighbour
    -- walk keeps this flat as a hub entity's facts grow.
    IF NOT EXISTS (SELECT 1 FROM pgmemory.community_members m WHERE m.group_id = p_group AND m.ended_at IS NULL) THEN
        stranded := (SELECT count(*) FROM (SELECT DISTINCT x FROM unnest(p_entities) AS x) n (e)
                      WHERE n.e = ANY (p_new)
                        AND EXISTS (SELECT 1 FROM pgmemory.facts f
                                     WHERE f.source_id = n.e AND upper_inf(f.recorded) AND f.group_id = p_group
                                    UNION ALL
                                    SELECT 1 FROM pgmemory.facts f
                                     WHERE f.target_id = n.e AND upper_inf(f.recorded) AND f.group_id = p_group));
        IF stranded > 0 THEN
            INSERT INTO pgmemory.community_state AS s (group_id, drift) VALUES (p_group, stranded)
            ON CONFLICT (group_id) DO UPDATE SET drift = s.drift + excluded.drift;
        END IF;
        RETURN 0;
    END IF;
    -- One entity at a time (an episode brings a handful): index probes only.
    FOR e IN SELECT DISTINCT x FROM unnest(p_entities) AS x LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pgmemory.community_members m
                               WHERE m.group_id = p_group AND m.entity_id = e AND m.ended_at IS NULL);
        WITH votes AS (
            SELECT c.community_id, count(*) AS w
              FROM (SELECT f.target_id AS nb FROM pgmemory.facts f
                     WHERE f.source_id = e AND upper_inf(f.recorded) AND f.group_id = p_group
                       AND pgmemory.holds_at(f.valid, f.is_event, now())
                    UNION ALL
                    SELECT f.source_id FROM pgmemory.facts f
                     WHERE f.target_id = e AND upper_inf(f.recorded) AND f.group_id = p_group
                       AND pgmemory.holds_at(f.valid, f.is_event, now())) n
              -- LIMIT 1 (an entity has one current community) keeps this a probe per neighbour.
              CROSS JOIN LATERAL (SELECT m.community_id FROM pgmemory.community_members m
                                   WHERE m.group_id = p_group AND m.entity_id = n.nb AND m.ended_at IS NULL
                                   LIMIT 1) c
             GROUP BY c.community_id
        )
        , top AS (
            SELECT v.community_id FROM votes v WHERE v.w = (SELECT max(x.w) FROM votes x)
        )
        -- Sizes and first member names are read only when communities tie at the top (they
        -- read every member); the id only among communities whose first members share a name.
        SELECT t.community_id INTO best
          FROM top t
         ORDER BY CASE WHEN (SELECT count(*) FROM top) > 1
                       THEN (SELECT count(*) FROM pgmemory.community_members s
                              WHERE s.group_id = p_group AND s.community_id = t.community_id
                                AND s.ended_at IS NULL) END DESC NULLS LAST,
                  CASE WHEN (SELECT count(*) FROM top) > 1
                       THEN (SELECT min(x.name COLLATE "C") FROM pgmemory.community_members s
                               JOIN pgmemory.entities x ON x.group_id = p_group AND x.id = s.entity_id
                              WHERE s.group_id = p_group AND s.community_id = t.community_id
                                AND s.ended_at IS NULL) END NULLS LAST,
                  t.community_id
         LIMIT 1;
        IF best IS NOT NULL THEN
            INSERT INTO pgmemory.community_members (community_id, entity_id, group_id, how)
            VALUES (best, e, p_group, 'joined');
            joined := joined || e;
        ELSIF e = ANY (p_new) AND EXISTS (SELECT 1 FROM pgmemory.facts f
                                           WHERE f.source_id = e AND upper_inf(f.recorded) AND f.group_id = p_group
                                          UNION ALL
                                          SELECT 1 FROM pgmemory.facts f
                                           WHERE f.target_id = e AND upper_inf(f.recorded) AND f.group_id = p_group) THEN
            stranded := stranded + 1;
        END IF;
    END LOOP;
    IF cardinality(joined) + stranded > 0 THEN
        INSERT INTO pgmemory.community_state AS s (group_id, drift) VALUES (p_group, cardinality(joined) + stranded)
        ON CONFLICT (group_id) DO UPDATE SET drift = s.drift + excluded.drift;
    END IF;

    -- The touched communities as an array first (one evaluation): an IN (subquery) here was
    -- planned as a re-run of the subquery for every current community of the group.
    UPDATE pgmemory.communities c SET revision = c.revision + 1, updated_at = now()
     WHERE c.group_id = p_group AND c.ended_at IS NULL
       AND c.id = ANY (ARRAY(SELECT m.community_id FROM unnest(p_changed || joined) AS x (e)
                             CROSS JOIN LATERAL (SELECT m.community_id FROM pgmemory.community_members m
                                                  WHERE m.group_id = p_group AND m.entity_id = x.e
                                                    AND m.ended_at IS NULL LIMIT 1) m));
    RETURN cardinality(joined);
END
$$;

-- Is a full re-detection due for the group: never detected and some entity
-- waits for a community, or its drift (members joined dynamically and
-- connected new entities left out since the last detection) has reached
-- community_drift_fraction (setting, default 0.2) of the members at that
-- detection, and at least community_drift_min (setting, default 10).
CREATE OR REPLACE FUNCTION pgmemory.communities_due(p_group text)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT CASE WHEN s.detected_at IS NULL THEN s.drift > 0
                                 ELSE s.drift >= greatest(
                                          coalesce((pgmemory_internal.setting('community_drift_min'))::integer, 10),
                                          coalesce((pgmemory_internal.setting('community_drift_fraction'))::float8, 0.2)
                                              * s.members_at_detection) END
                       FROM pgmemory.community_state s WHERE s.group_id = p_group), false)
$$;

-- Ends the group's current communities left with fewer than two members (after
-- deletes) and marks for refresh those holding p_entities (whose facts changed).
-- With p_erase, a summary and name that may quote erased text are blanked now, the
-- name's vector too (the next refresh writes them again) and ended versions holding p_entities are removed.
CREATE OR REPLACE FUNCTION pgmemory_internal.communities_after_delete(p_group text, p_entities uuid[], p_erase boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    gone uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    UPDATE pgmemory.communities c
       SET revision = c.revision + 1, updated_at = now(),
           summary = CASE WHEN p_erase THEN '' ELSE c.summary END,
           name = CASE WHEN p_erase THEN coalesce((
                      SELECT string_agg(x.name, ', ') FROM (
                          SELECT e.name FROM pgmemory.community_members m
                            JOIN pgmemory.entities e ON e.id = m.entity_id AND e.group_id = p_group
                           WHERE m.group_id = p_group AND m.community_id = c.id AND m.ended_at IS NULL
                           ORDER BY e.name LIMIT 3) x), '') ELSE c.name END,
           summary_kind = CASE WHEN p_erase THEN 'none' ELSE c.summary_kind END,
           -- (the vector of a name that may quote the erased text would still find it by cosine)
           name_embedding = CASE WHEN p_erase THEN NULL ELSE c.name_embedding END,
           summarized_revision = CASE WHEN p_erase THEN 0 ELSE c.summarized_revision END
     WHERE c.group_id = p_group AND c.ended_at IS NULL
       AND c.id IN (SELECT m.community_id FROM pgmemory.community_members m
                     WHERE m.group_id = p_group AND m.entity_id = ANY (p_entities)
                       -- (an erase: also where they were members, the summary may be older than their leaving)
                       AND (m.ended_at IS NULL OR p_erase));
    -- Members whose facts inside their community were deleted leave it (the drift counts them).
    PERFORM pgmemory_internal.community_departures(p_group, p_entities);
    IF p_erase THEN
        -- With their memberships (no foreign key cascades them, migration 0310).
        gone := ARRAY(SELECT c.id FROM pgmemory.communities c
                       WHERE c.group_id = p_group AND c.ended_at IS NOT NULL
                         AND c.id IN (SELECT m.community_id FROM pgmemory.community_members m
                                       WHERE m.group_id = p_group AND m.entity_id = ANY (p_entities)));
        DELETE FROM pgmemory.community_members WHERE group_id = p_group AND community_id = ANY (gone);
        DELETE FROM pgmemory.communities WHERE group_id = p_group AND id = ANY (gone);
    END IF;
    UPDATE pgmemory.community_members m SET ended_at = now()
     WHERE m.group_id = p_group AND m.ended_at IS NULL
       AND m.community_id IN (SELECT c.id FROM pgmemory.communities c
                               WHERE c.group_id = p_group AND c.ended_at IS NULL
                                 AND (SELECT count(*) FROM pgmemory.community_members x
                                       WHERE x.group_id = p_group AND x.community_id = c.id
                                         AND x.ended_at IS NULL) < 2);
    UPDATE pgmemory.communities c SET ended_at = now()
     WHERE c.group_id = p_group AND c.ended_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM pgmemory.community_members x
                        WHERE x.group_id = p_group AND x.community_id = c.id AND x.ended_at IS NULL);
    -- A version whose every member was deleted describes nothing any more.
    DELETE FROM pgmemory.communities c
     WHERE c.group_id = p_group AND c.ended_at IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pgmemory.community_members x
                        WHERE x.group_id = p_group AND x.community_id = c.id);
END
$$;

-- What a refresh needs to name and summarise the group's communities due for
-- it, at most p_limit of them: never summarised, or changed at least
-- p_min_changes times since (NULL: the setting community_refresh_changes,
-- default 4 — an LLM summary is rewritten after a few changes, not each one):
-- members (name, summary) most central first (facts inside the community),
-- at most 200, and the 20 most central facts' sentences inside it (facts
-- between its members, believed and holding now), most central first.
DROP FUNCTION IF EXISTS pgmemory_internal.community_digests(text, integer);
CREATE OR REPLACE FUNCTION pgmemory_internal.community_digests(p_group text, p_limit integer DEFAULT 100,
                                                      p_min_changes integer DEFAULT NULL)
RETURNS TABLE (id uuid, revision integer, members jsonb, facts jsonb) LANGUAGE sql STABLE AS $$
    WITH dirty AS (
        SELECT c.id, c.revision FROM pgmemory.communities c
         WHERE c.group_id = p_group AND c.ended_at IS NULL AND c.revision > c.summarized_revision
           AND (c.summarized_revision = 0
                OR c.revision - c.summarized_revision >= greatest(1, coalesce(
                       p_min_changes, (pgmemory_internal.setting('community_refresh_changes'))::integer, 4)))
         ORDER BY c.updated_at, c.id LIMIT p_limit
    ), mem AS (
        SELECT d.id AS community_id, m.entity_id
          FROM dirty d JOIN pgmemory.community_members m
            ON m.group_id = p_group AND m.community_id = d.id AND m.ended_at IS NULL
    ), inner_facts AS (
        SELECT a.community_id, f.fact, f.source_id, f.target_id, lower(f.recorded) AS rec
          FROM mem a
          JOIN pgmemory.facts f ON f.group_id = p_group AND f.source_id = a.entity_id
          JOIN mem b ON b.community_id = a.community_id AND b.entity_id = f.target_id
         WHERE upper_inf(f.recorded) AND pgmemory.holds_at(f.valid, f.is_event, now())
    ), deg AS (
        SELECT i.community_id, x.entity_id, count(*) AS d
          FROM inner_facts i CROSS JOIN LATERAL unnest(ARRAY[i.source_id, i.target_id]) AS x (entity_id)
         GROUP BY 1, 2
    )
    SELECT d.id, d.revision,
           coalesce((SELECT jsonb_agg(jsonb_build_object('name', y.name, 'summary', y.summary) ORDER BY y.d DESC, y.name)
                       FROM (SELECT e.name, e.summary, coalesce(g.d, 0) AS d
                               FROM mem JOIN pgmemory.entities e ON e.id = mem.entity_id AND e.group_id = p_group
                               LEFT JOIN deg g ON g.community_id = mem.community_id AND g.entity_id = mem.entity_id
                              WHERE mem.community_id = d.id
                              ORDER BY 3 DESC, 1 LIMIT 200) y), '[]'),
           coalesce((SELECT jsonb_agg(x.fact ORDER BY x.score DESC, x.rec DESC)
                       FROM (SELECT i.fact, max(i.rec) AS rec, max(coalesce(gs.d, 0) + coalesce(gt.d, 0)) AS score
                               FROM inner_facts i
                               LEFT JOIN deg gs ON gs.community_id = i.community_id AND gs.entity_id = i.source_id
                               LEFT JOIN deg gt ON gt.community_id = i.community_id AND gt.entity_id = i.target_id
                              WHERE i.community_id = d.id
                              GROUP BY i.fact ORDER BY 3 DESC, 2 DESC LIMIT 20) x), '[]')
      FROM dirty d
$$;

-- Write a community's name, summary and name embedding, made from revision
-- p_revision; a community ended meanwhile is left alone, and one changed
-- meanwhile stays marked (its revision is still ahead). True when written.
CREATE OR REPLACE FUNCTION pgmemory_internal.write_community_summary(
    p_group text, p_community uuid, p_revision integer, p_name text, p_summary text,
    p_embedding vector, p_kind text)
RETURNS boolean LANGUAGE sql AS $$
    SELECT pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    UPDATE pgmemory.communities
       SET name = p_name, summary = p_summary, name_embedding = p_embedding, summary_kind = p_kind,
           summarized_revision = greatest(summarized_revision, p_revision), updated_at = now()
     WHERE group_id = p_group AND id = p_community AND ended_at IS NULL
    RETURNING true
$$;

-- The LLM cost of community summaries, per group (they belong to no episode).
CREATE OR REPLACE FUNCTION pgmemory_internal.add_community_usage(p_group text, p_calls integer, p_prompt integer,
                                                        p_completion integer)
RETURNS void LANGUAGE sql AS $$
    SELECT pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    INSERT INTO pgmemory.community_state AS s (group_id, llm_calls, prompt_tokens, completion_tokens)
    VALUES (p_group, p_calls, p_prompt, p_completion)
    ON CONFLICT (group_id) DO UPDATE
        SET llm_calls = s.llm_calls + excluded.llm_calls, prompt_tokens = s.prompt_tokens + excluded.prompt_tokens,
            completion_tokens = s.completion_tokens + excluded.completion_tokens
$$;
