"""The per-group locks are row locks under row-level security (pgmemory.group_locks): a login
granted group A holds every lock it can take (the old advisory keys of B, B's lock rows, its own
group's rows and episodes) and the owner's write to B and a queue claim of B still go through at
once. Waits are bounded by lock_timeout, so a regression fails fast instead of hanging."""
from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from pgmemory.storage import grants
from pgmemory.storage.setup import init_database
from tests.conftest import DIM
from tests.servers import create_database, drop_database

ENQUEUE = "SELECT pgmemory.enqueue_episode(%s, %s, 'message', 'Zoe', %s)"
ADD_FACT = "SELECT pgmemory.add_fact(%s, 'Bob', 'KNOWS', %s, %s)"
CLAIM = "SELECT group_id, episode_id FROM pgmemory_internal.claim_episode('w', '1 minute')"


@pytest.fixture
def tenancy(admin_dsn):
    """A database of its own (the queue holds only this test's episodes), groups A and B, and an
    app login granted A only (`pgmemory grant ROLE A --app`)."""
    dsn = create_database(admin_dsn)
    tag = uuid.uuid4().hex[:8]
    a, b, role = f"lock-a-{tag}", f"lock-b-{tag}", f"app_a_{tag}"
    with psycopg.connect(dsn) as conn:
        init_database(conn, DIM)
        grants.grant(conn, role, [a], kind="app", create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    login = f"postgresql://{role}:pw@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"
    yield dict(dsn=dsn, login=login, a=a, b=b)
    drop_database(admin_dsn, dsn)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def owner(dsn: str) -> psycopg.Connection:
    """An owner session whose lock waits fail after 2 s (a regression is an error, not a hang)."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET lock_timeout = '2s'")
    conn.execute("SET statement_timeout = '20s'")
    return conn


def test_a_login_of_group_a_cannot_stall_the_writers_or_the_workers_of_group_b(tenancy):
    a, b = tenancy["a"], tenancy["b"]
    with owner(tenancy["dsn"]) as conn:
        conn.execute(ADD_FACT, (b, "Carol", "Bob knows Carol."))  # B's write row exists
        conn.execute(ENQUEUE, (a, "I work at Acme Corp.", "2024-01-01T00:00:00Z"))
        episode_b = conn.execute(ENQUEUE, (b, "I live in Lima.", "2024-01-02T00:00:00Z")).fetchone()[0]
    with psycopg.connect(tenancy["login"]) as tenant:  # one open transaction holding all it can
        tenant.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (b,))
        tenant.execute("SELECT pg_advisory_xact_lock(hashtextextended('pgmemory.queue:' || %s, 0))", (b,))
        tenant.execute("SELECT pgmemory_internal.lock_group(%s)", (a,))  # its own group's write lock
        rows = tenant.execute("SELECT group_id, purpose FROM pgmemory.group_locks FOR UPDATE").fetchall()
        assert sorted(rows) == [(a, "claim"), (a, "write")]
        assert tenant.execute("SELECT * FROM pgmemory.group_locks WHERE group_id = %s FOR UPDATE",
                              (b,)).fetchall() == []
        for purpose in ("write", "claim"):  # nor can it make (and so hold) a lock row of B
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                with tenant.transaction():
                    tenant.execute("INSERT INTO pgmemory.group_locks VALUES (%s, %s)", (b, purpose))
        with owner(tenancy["dsn"]) as conn:
            out = conn.execute(ADD_FACT, (b, "Dave", "Bob knows Dave.")).fetchone()[0]
            assert out["entities_created"] == ["Dave"]
            assert conn.execute(CLAIM).fetchone() == (b, episode_b)  # A's claim row is held: skipped
            # The lock is still a lock: the tenant holds A's, so a writer of A waits for it.
            conn.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                conn.execute(ADD_FACT, (a, "Erin", "Bob knows Erin."))
        tenant.rollback()


def test_a_login_holding_its_own_poisoned_episode_does_not_stall_the_claims(tenancy):
    """A claimer fails a poisoned episode (it took queue_max_attempts leases) before going on; a
    login of A that made its episode look poisoned and holds its row must not stop the claimer
    there (it skips A this time) and so keep every other group's episodes waiting."""
    a, b = tenancy["a"], tenancy["b"]
    with owner(tenancy["dsn"]) as conn:  # A's episode waits longest: the claimer looks at A first
        poisoned = conn.execute(ENQUEUE, (a, "I work at Acme Corp.", "2024-01-01T00:00:00Z")).fetchone()[0]
        episode_b = conn.execute(ENQUEUE, (b, "I live in Lima.", "2024-01-02T00:00:00Z")).fetchone()[0]
    with psycopg.connect(tenancy["login"]) as tenant:
        tenant.execute("UPDATE pgmemory.episodes SET attempts = 5 WHERE group_id = %s", (a,))
        tenant.commit()
        tenant.execute("SELECT 1 FROM pgmemory.episodes WHERE group_id = %s FOR UPDATE", (a,))
        with owner(tenancy["dsn"]) as conn:
            assert conn.execute(CLAIM).fetchone() == (b, episode_b)
        tenant.rollback()
    with owner(tenancy["dsn"]) as conn:  # let go, the claimer fails it as before
        assert conn.execute(CLAIM).fetchone() is None
        assert conn.execute("SELECT status FROM pgmemory.episodes WHERE id = %s", (poisoned,)).fetchone() == ("failed",)


def test_the_first_writes_of_a_new_group_create_its_lock_rows_once(tenancy):
    """The write row is made by the group's first write, the claim row by its first episode,
    under concurrent first writers alike (the loser waits for the winner's row, then locks it)."""
    a = tenancy["a"]
    with psycopg.connect(tenancy["login"]) as first, owner(tenancy["dsn"]) as second:
        first.execute(ADD_FACT, (a, "Carol", "Bob knows Carol."))  # uncommitted: holds the new row
        second.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            second.execute(ADD_FACT, (a, "Dave", "Bob knows Dave."))
        first.commit()
        second.execute("SET lock_timeout = '2s'")
        second.execute(ADD_FACT, (a, "Dave", "Bob knows Dave."))
        second.execute(ENQUEUE, (a, "I live in Lima.", "2024-01-02T00:00:00Z"))
        assert second.execute("SELECT purpose FROM pgmemory.group_locks WHERE group_id = %s ORDER BY 1",
                              (a,)).fetchall() == [("claim",), ("write",)]


def waiting_for_a_lock(conn: psycopg.Connection, pid: int) -> bool:
    """Whether backend `pid` is waiting for a lock."""
    return conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()[0] is True


def test_an_app_transaction_that_enqueues_then_writes_a_fact_never_deadlocks_with_a_delete(db_dsn, group):
    """An app stores a message and a fact in one transaction (enqueue_episode, then add_fact) while
    a delete of the group's episode runs: the delete waits for the app (its episode statistics), so
    the app's add_fact must not wait for the delete (its group lock): both finish, neither gets
    40P01 (docs/sql.md promises at most a 40001 to retry)."""
    with owner(db_dsn) as conn:
        old = conn.execute(ENQUEUE, (group, "I live in Lima.", "2024-01-02T00:00:00Z")).fetchone()[0]
    with owner(db_dsn) as app, owner(db_dsn) as deleter, owner(db_dsn) as watcher:
        deleter_pid = deleter.info.backend_pid
        with ThreadPoolExecutor(1) as pool:
            with app.transaction():
                app.execute(ENQUEUE, (group, "I work at Acme Corp.", "2024-01-03T00:00:00Z"))
                deleted = pool.submit(deleter.execute, "SELECT pgmemory.delete_episode(%s, %s)", (group, old))
                while not (deleted.done() or waiting_for_a_lock(watcher, deleter_pid)):
                    time.sleep(0.05)
                out = app.execute(ADD_FACT, (group, "Carol", "Bob knows Carol.")).fetchone()[0]
                assert out["entities_created"] == ["Bob", "Carol"]
            assert deleted.result().fetchone()[0]["erased"] is False
        statuses = watcher.execute("SELECT content FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchall()
        assert statuses == [("I work at Acme Corp.",)]


def test_a_batch_enqueue_across_groups_never_deadlocks_with_an_app_transaction(db_dsn, memory_sync_factory):
    """Memory.enqueue_episodes (one transaction, all or none) takes its groups' locks in name order,
    whatever the order of its episodes: an app transaction enqueueing into A then B while the batch
    (B's episode first, then A's) runs must not deadlock with it."""
    tag = uuid.uuid4().hex[:8]
    a, b = f"order-a-{tag}", f"order-b-{tag}"
    batch = [dict(group_id=b, content="I live in Lima.", actor="Zoe", reference_time="2024-01-02T00:00:00Z"),
             dict(group_id=a, content="I live in Oslo.", actor="Zoe", reference_time="2024-01-02T00:00:00Z")]
    with owner(db_dsn) as app, owner(db_dsn) as watcher, memory_sync_factory() as memory:
        with ThreadPoolExecutor(1) as pool:
            with app.transaction():
                app.execute(ENQUEUE, (a, "I work at Acme Corp.", "2024-01-03T00:00:00Z"))
                done = pool.submit(memory.enqueue_episodes, batch)
                while not (done.done() or watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND datname = current_database() AND pid <> %s",
                        (app.info.backend_pid,)).fetchone()[0]):
                    time.sleep(0.05)
                app.execute(ENQUEUE, (b, "I work at Globex.", "2024-01-03T00:00:00Z"))
            assert len(done.result()) == 2
        counts = watcher.execute("SELECT group_id, count(*) FROM pgmemory.episodes WHERE group_id = ANY(%s)"
                                 " GROUP BY 1 ORDER BY 1", ([a, b],)).fetchall()
        assert counts == [(a, 2), (b, 2)]
