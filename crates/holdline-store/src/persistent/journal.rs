//! The persistent store's journal: an append-only log of record states, synced once per
//! batch, checkpointed into redb in the background.
//!
//! Why: a redb commit copies every B-tree page it touches, and the addresses-of-record of one
//! batch are spread over the whole tree, so each REGISTER cost a 4 KiB page written and
//! synced (issue 21: 8.9 µs of the writer's CPU per REGISTER at 20,000/s, a third of the
//! server's). The journal writes each change once, in order, as one sequential append per
//! batch; redb gets the changes in large checkpoints, where many share a page.
//!
//! Files, beside the database `DIR/NAME.redb`: `DIR/NAME.GENERATION.wal`, each
//!
//! ```text
//! file    = magic:[u8;8] (= "HLJRNL01") generation:u64 entry*
//! entry   = len:u32 crc32:u32 payload            (crc32 of the payload)
//! payload = count:u32 (aor_len:u32 aor rec_len:u32 rec)*count
//!           (rec_len = u32::MAX: the address-of-record has no binding; rec: see `record`)
//! ```
//!
//! all integers little-endian. An entry is written with one `write` and made durable with
//! `fdatasync` before the batch counts as committed. The file is filled with zeros ahead of
//! the entries, a MiB at a time, so that an entry overwrites blocks that already exist and
//! its `fdatasync` flushes data only, with no file-system metadata to commit (measured on
//! this machine's virtual disk: about a third less CPU per sync and half the latency; one
//! sync in about 7,000 REGISTERs carries the next MiB). Replay ends at the first entry that is torn or
//! corrupt (a crash during its write; it was never acknowledged), which is cut off, or at
//! the zeros after the last one.
//!
//! Checkpoints: when the current file reaches `checkpoint_bytes`, the writer starts the next
//! generation and hands the addresses-of-record of the old one to the checkpointer, which
//! writes their *current* state into redb together with "every journal up to generation G
//! is in the database" (the `meta` table), then deletes those files. A state written by a
//! checkpoint is never older than the journal's (the journal is written before), so a crash
//! between the commit and the deletion only replays old entries over newer ones that the
//! newer journal entries then overwrite again; an address-of-record with no entry after the
//! checkpoint keeps the checkpoint's state, which was the memory store's.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The first 8 bytes of a journal file.
const MAGIC: &[u8; 8] = b"HLJRNL01";
/// Magic and generation.
const HEADER: u64 = 16;
/// `rec_len` of an address-of-record without bindings.
const REMOVED: u32 = u32::MAX;
/// An entry longer than this is read as corruption (a batch is far smaller).
const MAX_ENTRY: u32 = 1 << 30;
/// How far ahead of the entries the file is filled with zeros.
const ZEROED_AHEAD: u64 = 1 << 20;

/// The journal file of `generation` beside the database at `db`.
pub(crate) fn file_of(db: &Path, generation: u64) -> PathBuf {
    let stem = db
        .file_stem()
        .map_or_else(Default::default, |s| s.to_os_string());
    let mut name = stem;
    name.push(format!(".{generation:012}.wal"));
    db.with_file_name(name)
}

/// The journal files beside the database at `db`, by generation.
pub(crate) fn files(db: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(rest) = name
            .strip_prefix(stem.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(".wal"))
        else {
            continue;
        };
        if rest.len() == 12
            && rest.bytes().all(|b| b.is_ascii_digit())
            && let Ok(g) = rest.parse::<u64>()
        {
            out.push((g, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// What replaying a journal file found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Entries applied.
    pub(crate) entries: u64,
    /// Records applied.
    pub(crate) records: u64,
    /// Bytes cut off the end (a torn or corrupt last entry).
    pub(crate) cut: u64,
}

/// Replays the journal file at `path` through `apply(aor, record)` (`None`: no bindings)
/// and cuts off a torn or corrupt end. A file whose header is not a journal's is an error.
pub(crate) fn replay(
    path: &Path,
    mut apply: impl FnMut(&[u8], Option<&[u8]>),
) -> io::Result<Replayed> {
    let mut file = OpenOptions::new().read(true).write(true).open(path)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    if data.len() < HEADER as usize || &data[..8] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a holdline journal", path.display()),
        ));
    }
    let mut out = Replayed::default();
    let mut at = HEADER as usize;
    while at < data.len() {
        let Some(payload) = entry_at(&data, at) else {
            break;
        };
        let Some(records) = parse_payload(payload) else {
            break;
        };
        for (aor, rec) in records {
            apply(aor, rec);
            out.records += 1;
        }
        out.entries += 1;
        at += 8 + payload.len();
    }
    if data[at..].iter().any(|&b| b != 0) {
        out.cut = (data.len() - at) as u64;
        file.set_len(at as u64)?;
        file.sync_data()?;
    }
    Ok(out)
}

/// The payload of the entry at `at`, if it is whole and its checksum holds.
fn entry_at(data: &[u8], at: usize) -> Option<&[u8]> {
    let head = data.get(at..at + 8)?;
    let len = u32::from_le_bytes(head[..4].try_into().ok()?);
    let crc = u32::from_le_bytes(head[4..].try_into().ok()?);
    if len > MAX_ENTRY {
        return None;
    }
    let payload = data.get(at + 8..at + 8 + len as usize)?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}

/// One record of an entry: the address-of-record and its record (`None`: no bindings).
type Record<'a> = (&'a [u8], Option<&'a [u8]>);

/// The records of a payload; `None` if it does not parse whole.
fn parse_payload(p: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = p.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let u32_of = |s: &[u8]| s.try_into().ok().map(u32::from_le_bytes);
    let count = u32_of(take(4)?)?;
    let mut out = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let alen = u32_of(take(4)?)? as usize;
        let aor = take(alen)?;
        let rlen = u32_of(take(4)?)?;
        let rec = if rlen == REMOVED {
            None
        } else {
            Some(take(rlen as usize)?)
        };
        out.push((aor, rec));
    }
    (at == p.len()).then_some(out)
}

/// The bytes of one chunk of an [`AorLog`].
const AOR_CHUNK: usize = 1 << 20;

/// The addresses-of-record written to a journal file (what its checkpoint must write), in
/// the order written, repeats kept: an append-only log in chunks of a MiB, so that adding
/// one never moves what is there. A hash set of them rehashed everything it held each time
/// it grew, on the writer's path: 26-156 ms at a few hundred thousand addresses, and every
/// REGISTER waiting for that commit waited as long (`holdline lab storm`, 2026-12-01). Its
/// size is bounded by the journal file's (each record there holds the address too);
/// [`AorLog::sorted_unique`] drops the repeats, on the checkpointer's thread.
#[derive(Debug, Default)]
pub(crate) struct AorLog {
    /// Each address as its length (8 bytes, little-endian) and its bytes.
    chunks: Vec<Vec<u8>>,
}

impl AorLog {
    /// Appends `aor`.
    pub(crate) fn push(&mut self, aor: &[u8]) {
        let need = 8 + aor.len();
        if self
            .chunks
            .last()
            .is_none_or(|c| c.capacity() - c.len() < need)
        {
            self.chunks.push(Vec::with_capacity(AOR_CHUNK.max(need)));
        }
        if let Some(c) = self.chunks.last_mut() {
            c.extend_from_slice(&(aor.len() as u64).to_le_bytes());
            c.extend_from_slice(aor);
        }
    }

    /// Appends every address of `other`.
    pub(crate) fn append(&mut self, other: Self) {
        self.chunks.extend(other.chunks);
    }

    /// Every address appended, in order, repeats included.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.chunks.iter().flat_map(|c| {
            let mut at = 0usize;
            std::iter::from_fn(move || {
                let n = c.get(at..at + 8)?;
                let n = usize::try_from(u64::from_le_bytes(n.try_into().ok()?)).ok()?;
                let aor = c.get(at + 8..at + 8 + n)?;
                at += 8 + n;
                Some(aor)
            })
        })
    }

    /// Every distinct address, in byte order.
    pub(crate) fn sorted_unique(&self) -> Vec<&[u8]> {
        let mut v: Vec<&[u8]> = self.iter().collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The journal file being appended to, and the addresses-of-record it holds.
pub(crate) struct Journal {
    file: File,
    generation: u64,
    bytes: u64,
    /// The file is zeros from `bytes` to here.
    zeroed: u64,
    /// The entry being built: header space, count, records.
    entry: Vec<u8>,
    count: u32,
    /// Addresses-of-record with an entry in this file (what its checkpoint must write).
    aors: AorLog,
}

impl Journal {
    /// Creates the journal file of `generation` beside the database at `db` (an existing one
    /// is replaced), its first MiB after the header zeros, and syncs it and its directory.
    pub(crate) fn create(db: &Path, generation: u64) -> io::Result<Self> {
        let path = file_of(db, generation);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        let mut header = Vec::with_capacity(HEADER as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&generation.to_le_bytes());
        file.write_all_at(&header, 0)?;
        let mut j = Self {
            file,
            generation,
            bytes: HEADER,
            zeroed: HEADER,
            entry: Vec::new(),
            count: 0,
            aors: AorLog::default(),
        };
        j.extend_zeros(HEADER + ZEROED_AHEAD)?;
        j.file.sync_all()?;
        sync_dir(&path)?;
        Ok(j)
    }

    /// Fills the file with zeros up to a MiB beyond `upto`, unless it is zeros that far
    /// already.
    fn zero_ahead(&mut self, upto: u64) -> io::Result<()> {
        if upto <= self.zeroed {
            return Ok(());
        }
        self.extend_zeros(upto + ZEROED_AHEAD)
    }

    /// Writes zeros from the end of the zeroed part to `end`.
    fn extend_zeros(&mut self, end: u64) -> io::Result<()> {
        if end > self.zeroed {
            let zeros = vec![0u8; (end - self.zeroed) as usize];
            self.file.write_all_at(&zeros, self.zeroed)?;
            self.zeroed = end;
        }
        Ok(())
    }

    /// This file's generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The file's length.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Starts a new entry (dropping one begun and not written).
    pub(crate) fn begin(&mut self) {
        self.entry.clear();
        self.entry.extend_from_slice(&[0; 12]);
        self.count = 0;
    }

    /// Adds the state of `aor` to the entry: its record, or `None` for no bindings.
    pub(crate) fn push(&mut self, aor: &[u8], record: Option<&[u8]>) {
        let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX - 1);
        self.entry.extend_from_slice(&len(aor.len()).to_le_bytes());
        self.entry.extend_from_slice(aor);
        match record {
            Some(r) => {
                self.entry.extend_from_slice(&len(r.len()).to_le_bytes());
                self.entry.extend_from_slice(r);
            }
            None => self.entry.extend_from_slice(&REMOVED.to_le_bytes()),
        }
        self.count += 1;
        self.aors.push(aor);
    }

    /// Writes the entry and syncs the file: the entry is durable when this returns `Ok`. On
    /// an error the file is cut back to its previous length (what is cut was never
    /// acknowledged), so a later entry does not follow a partial one.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        let payload_len = u32::try_from(self.entry.len() - 8)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "journal entry too long"))?;
        self.entry[8..12].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32fast::hash(&self.entry[8..]);
        self.entry[..4].copy_from_slice(&payload_len.to_le_bytes());
        self.entry[4..8].copy_from_slice(&crc.to_le_bytes());
        let end = self.bytes + self.entry.len() as u64;
        let result = self
            .zero_ahead(end)
            .and_then(|()| self.file.write_all_at(&self.entry, self.bytes))
            .and_then(|()| self.file.sync_data());
        match result {
            Ok(()) => {
                self.bytes += self.entry.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Best effort: zeros over what may have been written, so that replay ends
                // at the last good entry; the next entry is written there again.
                let zeros = vec![0u8; self.entry.len()];
                let _ = self.file.write_all_at(&zeros, self.bytes);
                Err(e)
            }
        }
    }

    /// The addresses-of-record of this file, leaving it with none (for its checkpoint).
    pub(crate) fn take_aors(&mut self) -> AorLog {
        std::mem::take(&mut self.aors)
    }

    /// Adds addresses-of-record that this file's checkpoint must also write (a checkpoint
    /// that failed, or entries replayed at open).
    pub(crate) fn add_aors(&mut self, aors: AorLog) {
        self.aors.append(aors);
    }
}

/// Syncs the directory holding `path` (so that a created, renamed or removed file stays so
/// after a crash).
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => File::open(d)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aor_log_keeps_every_address_across_chunks_and_sorts_out_the_repeats() {
        let mut log = AorLog::default();
        // Enough addresses to fill several chunks, one of them longer than a chunk, each
        // written twice.
        let names: Vec<Vec<u8>> = (0..120_000u32)
            .map(|i| format!("sip:u{:06}@example.test", 119_999 - i).into_bytes())
            .chain(std::iter::once(vec![b'x'; AOR_CHUNK + 5]))
            .collect();
        for n in names.iter().chain(&names) {
            log.push(n);
        }
        assert!(log.chunks.len() > 2, "{} chunks", log.chunks.len());
        let written: Vec<&[u8]> = log.iter().collect();
        assert_eq!(written.len(), 2 * names.len());
        assert!(
            written
                .iter()
                .zip(names.iter().chain(&names))
                .all(|(a, b)| *a == b.as_slice())
        );
        let mut other = AorLog::default();
        other.push(b"sip:a@example.test");
        log.append(other);
        let unique = log.sorted_unique();
        assert_eq!(unique.len(), names.len() + 1);
        assert_eq!(unique[0], b"sip:a@example.test");
        assert!(unique.windows(2).all(|w| w[0] < w[1]));
        assert!(AorLog::default().sorted_unique().is_empty());
    }

    #[test]
    fn entries_replay_in_order_and_a_torn_end_is_cut() {
        let dir = tempfile::tempdir().expect("journal test");
        let db = dir.path().join("locations.redb");
        let mut j = Journal::create(&db, 7).expect("journal test");
        assert_eq!(
            file_of(&db, 7),
            dir.path().join("locations.000000000007.wal")
        );
        j.begin();
        j.push(b"a@x", Some(b"one"));
        j.push(b"b@x", Some(b"two"));
        j.commit().expect("journal test");
        j.begin();
        j.push(b"a@x", None);
        j.commit().expect("journal test");
        let good = j.bytes();
        drop(j);
        assert_eq!(
            fs::metadata(file_of(&db, 7)).expect("journal test").len(),
            16 + ZEROED_AHEAD,
            "zeros a MiB ahead"
        );
        // A torn third entry in the zeros: its header and half its payload.
        let f = OpenOptions::new()
            .write(true)
            .open(file_of(&db, 7))
            .expect("journal test");
        f.write_all_at(&[20, 0, 0, 0, 1, 2, 3, 4, 1, 0], good)
            .expect("journal test");
        drop(f);
        let mut seen = Vec::new();
        let r = replay(&file_of(&db, 7), |a, r| {
            seen.push((a.to_vec(), r.map(<[u8]>::to_vec)));
        })
        .expect("journal test");
        assert_eq!(
            seen,
            [
                (b"a@x".to_vec(), Some(b"one".to_vec())),
                (b"b@x".to_vec(), Some(b"two".to_vec())),
                (b"a@x".to_vec(), None),
            ]
        );
        assert_eq!((r.entries, r.records), (2, 3));
        assert_eq!(
            r.cut,
            16 + ZEROED_AHEAD - good,
            "the torn entry and the zeros after it"
        );
        assert_eq!(
            fs::metadata(file_of(&db, 7)).expect("journal test").len(),
            good
        );
        assert_eq!(files(&db).expect("journal test"), [(7, file_of(&db, 7))]);
    }

    #[test]
    fn a_flipped_bit_ends_the_replay_at_that_entry() {
        let dir = tempfile::tempdir().expect("journal test");
        let db = dir.path().join("s.redb");
        let mut j = Journal::create(&db, 1).expect("journal test");
        for n in 0..3u8 {
            j.begin();
            j.push(&[b'u', n], Some(&[n; 5]));
            j.commit().expect("journal test");
        }
        drop(j);
        let path = file_of(&db, 1);
        let mut data = fs::read(&path).expect("journal test");
        // The second entry's payload: header 16, first entry 8 + 4 + 4 + 2 + 4 + 5.
        let second = 16 + 27 + 8 + 6;
        data[second] ^= 0x40;
        fs::write(&path, &data).expect("journal test");
        let mut n = 0;
        let r = replay(&path, |_, _| n += 1).expect("journal test");
        assert_eq!((r.entries, n), (1, 1));
        assert_eq!(r.cut, data.len() as u64 - 16 - 27);
        // Undamaged, the zeros after the last entry end the replay and nothing is cut.
        let again = file_of(&db, 2);
        let mut j = Journal::create(&db, 2).expect("journal test");
        j.begin();
        j.push(b"z", None);
        j.commit().expect("journal test");
        drop(j);
        let r = replay(&again, |_, _| {}).expect("journal test");
        assert_eq!((r.entries, r.records, r.cut), (1, 1, 0));
        assert!(replay(&dir.path().join("nothing.wal"), |_, _| {}).is_err());
    }
}
