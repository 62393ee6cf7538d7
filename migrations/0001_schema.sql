-- pgmemory core schema: episodes, entities (+ versions), bi-temporal facts,
-- provenance, mentions, communities. Embedding columns are untyped here; the
-- dimension is fixed per database by pgmemory.set_embedding_dim() at init.

CREATE TABLE pgmemory.settings (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);

CREATE TABLE pgmemory.episodes (
    id                 uuid PRIMARY KEY,
    group_id           text NOT NULL,
    kind               text NOT NULL CHECK (kind IN ('message', 'text', 'json')),
    content            text NOT NULL,
    actor              text,
    source_description text NOT NULL DEFAULT '',
    valid_at           timestamptz NOT NULL,              -- t_ref: when it was said / happened
    recorded_at        timestamptz NOT NULL DEFAULT now(), -- when we ingested it
    status             text NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'processing', 'done', 'failed')),
    attempts           integer NOT NULL DEFAULT 0,
    error              text,
    llm_calls          integer NOT NULL DEFAULT 0,
    prompt_tokens      integer NOT NULL DEFAULT 0,
    completion_tokens  integer NOT NULL DEFAULT 0,
    metadata           jsonb NOT NULL DEFAULT '{}',
    embedding          vector,
    -- "speaker: content": what full text searches (questions name people).
    search_text        text GENERATED ALWAYS AS (coalesce(actor || ': ', '') || content) STORED,
    tsv                tsvector GENERATED ALWAYS AS
                       (to_tsvector('english', coalesce(actor, '') || ' ' || content)) STORED
);
CREATE INDEX episodes_group_time ON pgmemory.episodes (group_id, valid_at);
CREATE INDEX episodes_status ON pgmemory.episodes (status) WHERE status <> 'done';
CREATE INDEX episodes_tsv ON pgmemory.episodes USING gin (tsv);

CREATE TABLE pgmemory.entities (
    id             uuid PRIMARY KEY,
    group_id       text NOT NULL,
    name           text NOT NULL,
    labels         text[] NOT NULL DEFAULT '{Entity}',
    summary        text NOT NULL DEFAULT '',
    attributes     jsonb NOT NULL DEFAULT '{}',
    name_embedding vector,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    tsv            tsvector GENERATED ALWAYS AS
                   (to_tsvector('english', name || ' ' || summary)) STORED
);
CREATE INDEX entities_group ON pgmemory.entities (group_id);
CREATE INDEX entities_group_name ON pgmemory.entities (group_id, lower(name));
CREATE INDEX entities_tsv ON pgmemory.entities USING gin (tsv);
CREATE INDEX entities_labels ON pgmemory.entities USING gin (labels);

-- Prior versions of an entity (system-versioned by trigger in sql/).
CREATE TABLE pgmemory.entity_versions (
    entity_id  uuid NOT NULL REFERENCES pgmemory.entities (id) ON DELETE CASCADE,
    group_id   text NOT NULL,
    name       text NOT NULL,
    labels     text[] NOT NULL,
    summary    text NOT NULL,
    attributes jsonb NOT NULL,
    recorded   tstzrange NOT NULL,
    PRIMARY KEY (entity_id, recorded)
);
CREATE INDEX entity_versions_group ON pgmemory.entity_versions (group_id);

-- Facts are immutable versions. `id` is the stable fact id; each row is one
-- version. `valid` is world time (T), `recorded` transaction time (T').
-- A NULL (infinite) lower bound of `valid` means "start unknown"; a fact
-- true since forever uses '-infinity'. Likewise for the upper bound.
CREATE TABLE pgmemory.facts (
    version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         uuid NOT NULL,
    group_id   text NOT NULL,
    source_id  uuid NOT NULL REFERENCES pgmemory.entities (id),
    target_id  uuid NOT NULL REFERENCES pgmemory.entities (id),
    relation   text NOT NULL CHECK (relation ~ '^[A-Z][A-Z0-9_]*$'),
    fact       text NOT NULL,
    attributes jsonb NOT NULL DEFAULT '{}',
    embedding  vector,
    valid      tstzrange NOT NULL,
    recorded   tstzrange NOT NULL DEFAULT tstzrange(now(), NULL),
    -- The sentence plus the relation in words ("works for"): what full text searches.
    search_text text GENERATED ALWAYS AS (fact || ' (' || replace(lower(relation), '_', ' ') || ')') STORED,
    tsv        tsvector GENERATED ALWAYS AS
               (to_tsvector('english', fact || ' ' || replace(lower(relation), '_', ' '))) STORED,
    CHECK (source_id <> target_id),
    CHECK (NOT isempty(valid)),
    CHECK (NOT isempty(recorded) AND NOT lower_inf(recorded))
);
-- At most one version of a fact is believed at any moment of T'.
CREATE UNIQUE INDEX facts_one_current ON pgmemory.facts (id) WHERE upper_inf(recorded);
CREATE INDEX facts_id ON pgmemory.facts (id, version_id);
CREATE INDEX facts_group_current ON pgmemory.facts (group_id) WHERE upper_inf(recorded);
CREATE INDEX facts_pair ON pgmemory.facts (group_id, source_id, target_id);
CREATE INDEX facts_target ON pgmemory.facts (target_id);
CREATE INDEX facts_valid ON pgmemory.facts USING gist (valid);
CREATE INDEX facts_recorded ON pgmemory.facts USING gist (recorded);
CREATE INDEX facts_tsv ON pgmemory.facts USING gin (tsv);

-- Provenance: which episodes a fact (stable id) came from.
CREATE TABLE pgmemory.fact_episodes (
    fact_id    uuid NOT NULL,
    episode_id uuid NOT NULL REFERENCES pgmemory.episodes (id) ON DELETE CASCADE,
    group_id   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (fact_id, episode_id)
);
CREATE INDEX fact_episodes_episode ON pgmemory.fact_episodes (episode_id);

CREATE TABLE pgmemory.episode_mentions (
    episode_id uuid NOT NULL REFERENCES pgmemory.episodes (id) ON DELETE CASCADE,
    entity_id  uuid NOT NULL REFERENCES pgmemory.entities (id) ON DELETE CASCADE,
    group_id   text NOT NULL,
    PRIMARY KEY (episode_id, entity_id)
);
CREATE INDEX episode_mentions_entity ON pgmemory.episode_mentions (entity_id);

CREATE TABLE pgmemory.communities (
    id             uuid PRIMARY KEY,
    group_id       text NOT NULL,
    name           text NOT NULL,
    summary        text NOT NULL DEFAULT '',
    name_embedding vector,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    tsv            tsvector GENERATED ALWAYS AS
                   (to_tsvector('english', name || ' ' || summary)) STORED
);
CREATE INDEX communities_group ON pgmemory.communities (group_id);
CREATE INDEX communities_tsv ON pgmemory.communities USING gin (tsv);

CREATE TABLE pgmemory.community_members (
    community_id uuid NOT NULL REFERENCES pgmemory.communities (id) ON DELETE CASCADE,
    entity_id    uuid NOT NULL REFERENCES pgmemory.entities (id) ON DELETE CASCADE,
    group_id     text NOT NULL,
    PRIMARY KEY (community_id, entity_id)
);
CREATE INDEX community_members_entity ON pgmemory.community_members (entity_id);

-- AGE vertex id of each mirrored node (only filled when the graph is in AGE).
CREATE TABLE pgmemory.graph_vertices (
    node_id   uuid PRIMARY KEY,
    vertex_id bigint NOT NULL UNIQUE
);

-- AGE edge id of each mirrored relationship, keyed by what it mirrors
-- ('fact:<version_id>', 'mention:<episode>:<entity>', 'member:<community>:<entity>').
CREATE TABLE pgmemory.graph_edges (
    edge_key text PRIMARY KEY,
    edge_id  bigint NOT NULL UNIQUE
);
