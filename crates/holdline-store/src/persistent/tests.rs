//! PersistentStore tests on real files in a temporary directory. They synchronise on
//! `flush()` and on the writer gate, never on sleeps.

use super::*;
use holdline_base::{ConnId, Peer, Transport};
use redb::ReadableTable;
use std::time::UNIX_EPOCH;

/// Blocks the writer (after it has taken a batch, before it touches the database) until
/// opened; counts how often the writer arrived.
pub(super) struct Gate {
    state: Mutex<(bool, usize)>,
    cv: Condvar,
}

impl Gate {
    fn closed() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new((false, 0)),
            cv: Condvar::new(),
        })
    }

    pub(super) fn pass(&self) {
        let mut st = self.state.lock();
        st.1 += 1;
        self.cv.notify_all();
        while !st.0 {
            self.cv.wait(&mut st);
        }
    }

    /// Waits until the writer has arrived `n` times in total.
    fn wait_arrivals(&self, n: usize) {
        let mut st = self.state.lock();
        while st.1 < n {
            self.cv.wait(&mut st);
        }
    }

    fn arrivals(&self) -> usize {
        self.state.lock().1
    }

    fn open(&self) {
        self.state.lock().0 = true;
        self.cv.notify_all();
    }
}

/// A wall-clock time far from the epoch, so that arithmetic on it is visible.
fn wall(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

/// Settings under which the writer never runs on its own: only `flush` and `Drop` make it
/// write, so batch counts are exact.
fn manual() -> PersistentConfig {
    PersistentConfig {
        flush_interval: Duration::from_secs(3_600),
        max_batch: usize::MAX,
        ..PersistentConfig::default()
    }
}

fn open(path: &Path, now: Instant, wall_now: SystemTime) -> PersistentStore {
    PersistentStore::open_with(path, now, wall_now, manual()).expect("open store")
}

fn get(store: &impl LocationStore, aor: &[u8], now: Instant) -> Vec<Binding> {
    let mut out = Vec::new();
    store.lookup(aor, now, &mut out);
    out
}

fn binding(contact: &str, expires_at: Instant, source: Option<Peer>) -> Binding {
    Binding {
        contact: contact.as_bytes().into(),
        expires_at,
        q: 700,
        call_id: format!("call-{contact}").into_bytes().into(),
        cseq: 42,
        source,
    }
}

fn set(store: &impl LocationStore, aor: &str, now: Instant, bindings: Vec<Binding>) {
    let mut bindings = Some(bindings);
    store.modify(aor.as_bytes(), now, &mut |v| {
        *v = bindings.take().unwrap_or_default();
    });
}

#[test]
fn bindings_survive_close_and_reopen_field_by_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::from_secs(50);
    let v4 = Peer {
        addr: "192.0.2.10:5070".parse().expect("addr"),
        transport: Transport::Tcp,
        conn: Some(ConnId(99)),
    };
    let v6 = Peer {
        addr: "[2001:db8::7]:5061".parse().expect("addr"),
        transport: Transport::Tls,
        conn: None,
    };
    let written = vec![
        binding(
            "sip:alice@192.0.2.10:5070",
            t0 + Duration::from_secs(3_600),
            Some(v4),
        ),
        binding(
            "sip:alice@[2001:db8::7]",
            t0 + Duration::from_millis(7_200_250),
            Some(v6),
        ),
        binding("sip:alice@host", Instant::MAX, None),
    ];
    {
        let s = open(&path, t0, wall(0));
        assert_eq!(s.load_report().loaded, 0);
        set(&s, "alice@example.com", t0, written.clone());
        let bob = vec![binding("sip:bob@h", t0 + Duration::from_secs(60), None)];
        set(&s, "bob@example.com", t0, bob);
        s.flush().expect("flush");
        let stats = s.stats();
        assert_eq!(stats.batches_written, 1);
        assert_eq!(stats.records_written, 2);
        assert_eq!(stats.pending, 0);
        assert_eq!(stats.write_errors, 0);
    }
    // Reopen 10 s of wall-clock time later, under a different monotonic epoch.
    let t1 = Instant::from_secs(7);
    let s = open(&path, t1, wall(10));
    let r = s.load_report();
    assert_eq!(
        (r.aors, r.loaded, r.expired_dropped, r.corrupt_skipped),
        (2, 4, 0, 0)
    );
    assert_eq!(s.len(), 4);
    assert_eq!(s.aor_count(), 2);
    let want: Vec<Binding> = written
        .iter()
        .zip([
            t1 + Duration::from_secs(3_590),
            t1 + Duration::from_millis(7_190_250),
            Instant::MAX,
        ])
        .map(|(w, expires_at)| Binding {
            expires_at,
            source: w.source.map(|p| Peer { conn: None, ..p }),
            ..w.clone()
        })
        .collect();
    let got = get(&s, b"alice@example.com", t1);
    assert_eq!(got.len(), 3);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.contact, w.contact);
        assert_eq!(g.expires_at, w.expires_at);
        assert_eq!(g.q, w.q);
        assert_eq!(g.call_id, w.call_id);
        assert_eq!(g.cseq, w.cseq);
        assert_eq!(g.source, w.source);
    }
    assert_eq!(got, want);
    assert_eq!(get(&s, b"bob@example.com", t1).len(), 1);
}

#[test]
fn bindings_expired_at_reopen_are_dropped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    {
        let s = open(&path, t0, wall(0));
        set(
            &s,
            "a@x",
            t0,
            vec![
                binding("short", t0 + Duration::from_secs(5), None),
                binding("long", t0 + Duration::from_secs(3_600), None),
            ],
        );
        set(
            &s,
            "b@x",
            t0,
            vec![binding("short", t0 + Duration::from_secs(10), None)],
        );
        s.flush().expect("flush");
    }
    {
        // 10 s later: "a@x short" (5 s) and "b@x short" (exactly 10 s) have expired.
        let s = open(&path, t0, wall(10));
        let r = s.load_report();
        assert_eq!((r.aors, r.loaded, r.expired_dropped), (1, 1, 2));
        assert_eq!(s.len(), 1);
        assert!(get(&s, b"b@x", t0).is_empty());
        let a = get(&s, b"a@x", t0);
        assert_eq!(a.len(), 1);
        assert_eq!(&*a[0].contact, b"long");
        // The records are rewritten without the expired bindings (b@x deleted).
        assert_eq!(s.stats().pending, 2);
        s.flush().expect("flush");
        assert_eq!(s.stats().records_written, 2);
    }
    let s = open(&path, t0, wall(10));
    let r = s.load_report();
    assert_eq!((r.aors, r.loaded, r.expired_dropped), (1, 1, 0));
}

#[test]
fn a_binding_removed_before_close_is_gone_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    {
        let s = open(&path, t0, wall(0));
        set(
            &s,
            "a@x",
            t0,
            vec![binding("one", far, None), binding("two", far, None)],
        );
        set(&s, "gone@x", t0, vec![binding("x", far, None)]);
        s.flush().expect("flush");
        // Remove one binding of a@x and every binding of gone@x; no flush: Drop writes it.
        s.modify(b"a@x", t0, &mut |v| v.retain(|b| &*b.contact != b"one"));
        s.modify(b"gone@x", t0, &mut Vec::clear);
        assert_eq!(s.len(), 1);
    }
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().aors, 1);
    assert_eq!(s.len(), 1);
    assert!(get(&s, b"gone@x", t0).is_empty());
    let a = get(&s, b"a@x", t0);
    assert_eq!(a.len(), 1);
    assert_eq!(&*a[0].contact, b"two");
}

#[test]
fn purged_bindings_are_persisted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    {
        let s = open(&path, t0, wall(0));
        set(
            &s,
            "a@x",
            t0,
            vec![binding("short", t0 + Duration::from_secs(5), None)],
        );
        s.flush().expect("flush");
        assert_eq!(s.purge_expired(t0 + Duration::from_secs(5)), 1);
        s.flush().expect("flush");
        assert_eq!(s.stats().records_written, 2);
    }
    // Reopened at the same wall time: the binding would be live if the purge were not written.
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().loaded, 0);
    assert!(s.is_empty());
}

#[test]
fn many_modifies_of_one_aor_coalesce_to_the_final_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    const MODIFIES: u32 = 1_000;
    {
        let s = open(&path, t0, wall(0));
        for i in 0..MODIFIES {
            s.modify(b"busy@x", t0, &mut |v| {
                v.clear();
                v.push(Binding {
                    cseq: i,
                    ..binding("sip:busy@h", far, None)
                });
            });
        }
        assert_eq!(s.stats().pending, 1);
        s.flush().expect("flush");
        let stats = s.stats();
        assert!(stats.records_written < u64::from(MODIFIES));
        assert_eq!((stats.batches_written, stats.records_written), (1, 1));
    }
    let s = open(&path, t0, wall(0));
    let got = get(&s, b"busy@x", t0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].cseq, MODIFIES - 1);
}

#[test]
fn a_corrupt_record_is_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    {
        let s = open(&path, t0, wall(0));
        set(&s, "good@x", t0, vec![binding("g", far, None)]);
        set(&s, "bad@x", t0, vec![binding("b", far, None)]);
        set(&s, "worse@x", t0, vec![binding("w", far, None)]);
    }
    {
        // Damage two records behind the store's back: a truncated one, an unknown version.
        let db = Database::create(&path).expect("redb open");
        let txn = db.begin_write().expect("txn");
        {
            let mut table = txn.open_table(TABLE).expect("table");
            let whole = table
                .get(b"bad@x".as_slice())
                .expect("get")
                .expect("present");
            let cut = whole.value()[..10].to_vec();
            drop(whole);
            table
                .insert(b"bad@x".as_slice(), cut.as_slice())
                .expect("insert");
            table
                .insert(b"worse@x".as_slice(), [99u8, 0, 0].as_slice())
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let s = open(&path, t0, wall(0));
    let r = s.load_report();
    assert_eq!((r.aors, r.loaded, r.corrupt_skipped), (1, 1, 2));
    assert_eq!(r.corrupt.len(), 2);
    let messages: Vec<String> = r.corrupt.iter().map(ToString::to_string).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("bad@x") && m.contains("truncated"))
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("worse@x") && m.contains("version 99"))
    );
    assert!(
        messages
            .iter()
            .all(|m| m.contains(&*path.to_string_lossy()))
    );
    assert!(matches!(
        &r.corrupt[0],
        StoreError::CorruptRecord { path: p, .. } if *p == path
    ));
    assert_eq!(get(&s, b"good@x", t0).len(), 1);
    assert!(get(&s, b"bad@x", t0).is_empty());
    // Registering the address-of-record again overwrites the damaged record.
    set(&s, "bad@x", t0, vec![binding("b2", far, None)]);
    drop(s);
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().corrupt_skipped, 1);
    assert_eq!(get(&s, b"bad@x", t0).len(), 1);
}

#[test]
fn opening_in_a_missing_or_unusable_directory_names_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-dir").join("location.redb");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write");
    let under_file = file.join("location.redb");
    for path in [missing, under_file] {
        let err = PersistentStore::open(&path, Instant::ZERO).expect_err("must fail");
        assert!(matches!(&err, StoreError::Open { path: p, .. } if *p == path));
        let msg = err.to_string();
        assert!(msg.contains(&*path.to_string_lossy()), "{msg}");
        assert!(std::error::Error::source(&err).is_some());
    }
}

#[test]
fn modify_never_waits_for_the_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let gate = Gate::closed();
    let hooks = Hooks {
        gate: Some(Arc::clone(&gate)),
    };
    let config = PersistentConfig {
        flush_interval: Duration::from_secs(3_600),
        max_batch: 1,
        ..PersistentConfig::default()
    };
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let s = PersistentStore::open_hooked(&path, t0, wall(0), config, hooks).expect("open");
    // The first change wakes the writer (max_batch 1), which takes it and blocks in the gate.
    set(&s, "first@x", t0, vec![binding("f", far, None)]);
    gate.wait_arrivals(1);
    // With the writer stuck before the disk, 10,000 modifies still complete.
    const N: usize = 10_000;
    for i in 0..N {
        set(&s, &format!("user{i}@x"), t0, vec![binding("c", far, None)]);
    }
    assert_eq!(s.len(), N + 1);
    let stats = s.stats();
    assert_eq!(stats.pending, N);
    assert_eq!(stats.batches_written, 0);
    assert_eq!(gate.arrivals(), 1, "the writer is still held in the gate");
    gate.open();
    s.flush().expect("flush");
    let stats = s.stats();
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.records_written, (N + 1) as u64);
    drop(s);
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().loaded, N + 1);
}

#[test]
fn flush_with_nothing_pending_returns_at_once_and_drop_joins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let s = PersistentStore::open(&path, Instant::ZERO).expect("open");
    s.flush().expect("flush");
    s.flush().expect("flush");
    assert_eq!(s.stats(), StoreStats::default());
    assert_eq!(s.path(), path);
    // Another store on the same file while this one is open is refused, naming the path.
    let err = PersistentStore::open(&path, Instant::ZERO).expect_err("already open");
    assert!(err.to_string().contains(&*path.to_string_lossy()));
    drop(s);
    PersistentStore::open(&path, Instant::ZERO).expect("reopen after drop");
}

#[test]
fn concurrent_modifies_are_all_persisted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let config = PersistentConfig {
        flush_interval: Duration::from_millis(1),
        max_batch: 16,
        ..PersistentConfig::default()
    };
    {
        let s = PersistentStore::open_with(&path, t0, wall(0), config).expect("open");
        thread::scope(|scope| {
            for t in 0..4 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..500 {
                        let contact = format!("sip:{t}-{i}@h");
                        s.modify(format!("u{}@x", i % 50).as_bytes(), t0, &mut |v| {
                            v.push(binding(&contact, far, None));
                        });
                    }
                });
            }
        });
        s.flush().expect("flush");
        assert_eq!(s.len(), 2_000);
    }
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().loaded, 2_000);
    assert_eq!(s.load_report().aors, 50);
}

/// With `durability = commit` a ticket starts its batch at once (the flush interval here is an
/// hour), is not committed while that batch is held before the disk, and changes made
/// meanwhile share the next batch (group commit); the listener sees each commit.
#[test]
fn a_commit_ticket_is_committed_only_once_its_batch_is_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let gate = Gate::closed();
    let hooks = Hooks {
        gate: Some(Arc::clone(&gate)),
    };
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let s = PersistentStore::open_hooked(&path, t0, wall(0), manual(), hooks).expect("open");
    let (tx, rx) = mpsc::channel();
    s.set_commit_listener(Arc::new(move |id| {
        let _ = tx.send(id);
    }));
    assert_eq!(s.committed(), 0);
    set(&s, "a@x", t0, vec![binding("a", far, None)]);
    let first = s.commit_ticket().expect("commit mode issues tickets");
    gate.wait_arrivals(1);
    assert!(s.committed() < first, "held before the disk");
    set(&s, "b@x", t0, vec![binding("b", far, None)]);
    let second = s.commit_ticket().expect("ticket");
    set(&s, "c@x", t0, vec![binding("c", far, None)]);
    assert_eq!(s.commit_ticket(), Some(second), "one batch for both");
    assert_eq!(second, first + 1);
    gate.open();
    let mut seen = Vec::new();
    while seen.last() != Some(&second) {
        seen.push(rx.recv().expect("the listener hears every commit"));
    }
    assert_eq!(seen, vec![first, second]);
    assert!(s.committed() >= second);
    let stats = s.stats();
    assert_eq!((stats.batches_written, stats.records_written), (2, 3));
    assert_eq!(stats.pending, 0);
    let times = &stats.commit_times;
    assert_eq!(times.count(), 2, "both commits timed: {times:?}");
    assert!(
        times.max_us > 0 && times.sum_us >= times.max_us,
        "{times:?}"
    );
    drop(s);
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().loaded, 3);
}

#[test]
fn write_behind_issues_no_tickets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = PersistentConfig {
        durability: Durability::WriteBehind,
        ..manual()
    };
    let s = PersistentStore::open_with(dir.path().join("l.redb"), Instant::ZERO, wall(0), config)
        .expect("open");
    set(&s, "a@x", Instant::ZERO, Vec::new());
    assert_eq!(s.commit_ticket(), None);
    assert_eq!(s.committed(), u64::MAX);
    assert_eq!(s.stats().batches_written, 0, "nothing started a batch");
}

/// The commit window: after a commit, the next one waits for the window (an hour here) unless
/// `max_batch` addresses-of-record are pending, so the changes that arrive meanwhile share one
/// transaction, however many tickets were asked for; closing the store does not wait for it.
#[test]
fn commits_within_the_window_are_grouped_and_closing_does_not_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let config = PersistentConfig {
        commit_window: Duration::from_secs(3_600),
        max_batch: 3,
        ..manual()
    };
    {
        let s = PersistentStore::open_with(&path, t0, wall(0), config).expect("open");
        let (tx, rx) = mpsc::channel();
        s.set_commit_listener(Arc::new(move |id| {
            let _ = tx.send(id);
        }));
        let wait_for = |ticket: u64| {
            while s.committed() < ticket {
                rx.recv_timeout(Duration::from_secs(20))
                    .expect("a commit within 20 s");
            }
        };
        // The first commit has no window before it.
        set(&s, "a@x", t0, vec![binding("a", far, None)]);
        let first = s.commit_ticket().expect("ticket");
        wait_for(first);
        // Three REGISTERs, each asking for a commit: one transaction, started by the third
        // (max_batch), not by the window.
        let mut tickets = Vec::new();
        for aor in ["b@x", "c@x", "d@x"] {
            set(&s, aor, t0, vec![binding(aor, far, None)]);
            tickets.push(s.commit_ticket().expect("ticket"));
        }
        // The third modify starts the batch (max_batch) before its ticket is asked for, so
        // that ticket may name the next batch; the change itself is in this one.
        assert_eq!(&tickets[..2], &[first + 1; 2], "one batch for the three");
        assert!(tickets[2] > first);
        wait_for(first + 1);
        let st = s.stats();
        assert_eq!((st.batches_written, st.records_written), (2, 4), "{st:?}");
        // Inside the window again: closing writes it at once.
        set(&s, "e@x", t0, vec![binding("e", far, None)]);
        assert_eq!(s.commit_ticket(), Some(first + 2));
    }
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().aors, 5);
}

/// What a crash leaves on disk right now: the database and the journal files copied into
/// `to` (the running store keeps them open; what is copied is what its syncs made durable,
/// with no checkpoint running).
fn snapshot(from: &Path, to: &Path) -> PathBuf {
    let db = to.join(from.file_name().expect("file name"));
    std::fs::copy(from, &db).expect("copy database");
    for (_, file) in journal::files(from).expect("journal files") {
        std::fs::copy(&file, to.join(file.file_name().expect("name"))).expect("copy journal");
    }
    db
}

#[test]
fn a_crash_after_the_commit_keeps_the_change_through_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crash = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let s = open(&path, t0, wall(0));
    for n in 0..50 {
        set(
            &s,
            &format!("u{n}@x"),
            t0,
            vec![binding(&format!("c{n}"), far, None)],
        );
    }
    set(&s, "gone@x", t0, vec![binding("g", far, None)]);
    s.flush().expect("flush");
    set(&s, "gone@x", t0, Vec::new());
    s.flush().expect("flush");
    // Not checkpointed yet (64 MiB): the database alone has none of them.
    assert_eq!(s.stats().checkpoints, 0);
    let copy = snapshot(&path, crash.path());
    // An acknowledged change still in the journal, then the crash.
    let after = open(&copy, t0, wall(0));
    let r = after.load_report();
    assert_eq!(
        r.replayed, 52,
        "50 registrations, one binding added and removed"
    );
    assert_eq!((r.aors, r.loaded, r.journal_cut_bytes), (50, 50, 0));
    for n in 0..50 {
        assert_eq!(get(&after, format!("u{n}@x").as_bytes(), t0).len(), 1);
    }
    assert!(get(&after, b"gone@x", t0).is_empty());
    drop(after);
    // The open checkpointed the replay: the next open replays nothing and finds all.
    let again = open(&copy, t0, wall(0));
    assert_eq!(again.load_report().replayed, 0);
    assert_eq!(again.load_report().loaded, 50);
    assert_eq!(
        journal::files(&copy).expect("files").len(),
        1,
        "one new journal"
    );
    drop(s);
}

#[test]
fn a_torn_journal_entry_is_cut_and_the_entries_before_it_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crash = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let s = open(&path, t0, wall(0));
    set(&s, "a@x", t0, vec![binding("a", far, None)]);
    s.flush().expect("flush");
    let copy = snapshot(&path, crash.path());
    drop(s);
    // A crash in the middle of the next entry's write.
    let (_, wal) = journal::files(&copy)
        .expect("files")
        .pop()
        .expect("a journal");
    let data = std::fs::read(&wal).expect("read journal");
    // One entry (one flush) after the 16-byte header: its length, then 8 bytes of header.
    let len = u32::from_le_bytes(data[16..20].try_into().expect("length"));
    let end = 16 + 8 + len as usize;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&wal)
        .expect("open journal");
    std::os::unix::fs::FileExt::write_all_at(&f, &[200, 0, 0, 0, 9, 9, 9, 9, 1], end as u64)
        .expect("write");
    drop(f);
    let after = open(&copy, t0, wall(0));
    let r = after.load_report();
    assert_eq!((r.replayed, r.loaded), (1, 1));
    assert_eq!(
        r.journal_cut_bytes,
        data.len() as u64 - end as u64,
        "the torn entry and the zeros after it"
    );
    assert_eq!(get(&after, b"a@x", t0).len(), 1);
}

#[test]
fn full_journals_are_checkpointed_in_the_background_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    let config = PersistentConfig {
        checkpoint_bytes: 2_000,
        ..manual()
    };
    let s = PersistentStore::open_with(&path, t0, wall(0), config.clone()).expect("open");
    for round in 0..40 {
        for n in 0..10 {
            let c = format!("c{round}-{n}");
            set(&s, &format!("u{n}@x"), t0, vec![binding(&c, far, None)]);
        }
        s.flush().expect("flush");
        // Never more than the file being written and one being checkpointed.
        assert!(journal::files(&path).expect("files").len() <= 2);
    }
    let stats = s.stats();
    assert!(stats.checkpoints >= 5, "{stats:?}");
    assert_eq!(stats.checkpoint_errors, 0);
    drop(s);
    // Closing checkpointed the last journal: nothing to replay, every last state found.
    let s = PersistentStore::open_with(&path, t0, wall(0), config).expect("open");
    assert_eq!(s.load_report().replayed, 0);
    for n in 0..10 {
        let b = get(&s, format!("u{n}@x").as_bytes(), t0);
        assert_eq!(b.len(), 1);
        assert_eq!(&*b[0].contact, format!("c39-{n}").as_bytes());
    }
}

#[test]
fn a_checkpoint_of_several_transactions_writes_every_change() {
    // 25,000 changes: three of the checkpointer's transactions, the journals marked written
    // by the last.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("location.redb");
    let t0 = Instant::ZERO;
    let far = t0 + Duration::from_secs(3_600);
    {
        let s = open(&path, t0, wall(0));
        for n in 0..25_000 {
            set(&s, &format!("u{n}@x"), t0, vec![binding("c", far, None)]);
        }
        s.flush().expect("flush");
    }
    assert_eq!(
        journal::files(&path).expect("files").len(),
        0,
        "all written at close"
    );
    let s = open(&path, t0, wall(0));
    assert_eq!(s.load_report().replayed, 0);
    assert_eq!(s.load_report().loaded, 25_000);
}
