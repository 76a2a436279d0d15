//! SQLite's write-ahead log, read and appended as bytes, for a host that
//! holds a copy of the database in memory (the wasm package in Node) and
//! shares the file with processes that use SQLite itself (the CLI).
//!
//! A database in WAL mode is two files: the main file, and a `-wal` of
//! frames (a page each) appended by every commit, which checkpoints copy
//! back. Reading only the main file misses every recent commit; so
//! [`committed_image`] applies the log's committed frames to the main file's
//! bytes, exactly as SQLite's own recovery does: frames count only up to
//! the last valid commit frame whose salts and running checksum match.
//! [`Log::append`] writes a commit the same way SQLite would, a frame per
//! changed page ending in a commit frame, and [`INDEX_HEADER`] is the part
//! of `-shm` to clear so that every connection rebuilds its index of the
//! log (SQLite's recovery path) and sees the new frames.
//!
//! The format is SQLite's published one (<https://sqlite.org/fileformat2.html#walformat>),
//! stable since 3.7.0; it is written here because no crate exposes it. This
//! module is pure: bytes in, bytes out. It must never do I/O or decide when
//! writing is safe; that is [`crate::shared_file`]'s job.

use std::fmt;

/// The log's magic number with checksums over little-endian words.
const MAGIC_LE: u32 = 0x377f_0682;
/// The log's magic number with checksums over big-endian words.
const MAGIC_BE: u32 = 0x377f_0683;
/// The only log format version.
const VERSION: u32 = 3_007_000;
/// Bytes in the log's header.
const HEADER: usize = 32;
/// Bytes in each frame's header.
const FRAME_HEADER: usize = 24;

/// The bytes at the start of `-shm` that hold the two copies of the log
/// index's header. Zeroing them marks the index as not initialized, which
/// makes the next transaction of every connection rebuild the index from
/// the log (SQLite's recovery), seeing every commit in it.
pub const INDEX_HEADER: std::ops::Range<usize> = 0..96;

/// Why bytes are not a database SQLite could have written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

/// The database's page size, from its header (offset 16; 1 means 65536).
pub fn page_size(db: &[u8]) -> Result<usize, FormatError> {
    if db.len() < 100 || !db.starts_with(b"SQLite format 3\0") {
        return Err(FormatError(
            "not an SQLite database (no SQLite header)".into(),
        ));
    }
    let raw = u16::from_be_bytes([db[16], db[17]]);
    let size = if raw == 1 { 65536 } else { usize::from(raw) };
    if !size.is_power_of_two() || !(512..=65536).contains(&size) {
        return Err(FormatError(format!(
            "the SQLite header gives page size {size}, which SQLite never writes"
        )));
    }
    Ok(size)
}

/// Whether the database's header says it is in WAL mode (bytes 18 and 19,
/// the file format's write and read versions, are 2).
pub fn is_wal_mode(db: &[u8]) -> bool {
    db.len() >= 100 && db[18] == 2 && db[19] == 2
}

/// A log as far as it is valid: where its committed frames end and the
/// values a new frame must continue from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// Checksums over big-endian words (magic 0x377f0683).
    big_endian: bool,
    page_size: usize,
    checkpoint_sequence: u32,
    salts: [u32; 2],
    /// The running checksum after the last committed frame (or the header).
    checksum: [u32; 2],
    /// Committed frames, from the start of the log.
    frames: usize,
    /// The database's size in pages after the last commit, if any.
    pages: Option<u32>,
    /// Whether the header itself is valid; if not, an append starts a new log.
    valid: bool,
}

impl Log {
    /// Parses `wal` (empty when there is no `-wal` file) for a database of
    /// `page_size`, keeping the frames SQLite's recovery would keep.
    pub fn parse(wal: &[u8], page_size: usize) -> Log {
        let mut log = Log::empty(page_size);
        let Some(header) = Header::parse(wal, page_size) else {
            return log;
        };
        log.big_endian = header.big_endian;
        log.checkpoint_sequence = header.checkpoint_sequence;
        log.salts = header.salts;
        log.checksum = header.checksum;
        log.valid = true;
        let mut running = header.checksum;
        let frame_len = FRAME_HEADER + page_size;
        for (i, frame) in wal[HEADER..].chunks_exact(frame_len).enumerate() {
            let Some((commit, after)) = log.check_frame(frame, running) else {
                break;
            };
            running = after;
            if commit != 0 {
                log.frames = i + 1;
                log.pages = Some(commit);
                log.checksum = after;
            }
        }
        log
    }

    fn empty(page_size: usize) -> Log {
        Log {
            big_endian: false,
            page_size,
            checkpoint_sequence: 0,
            salts: [0, 0],
            checksum: [0, 0],
            frames: 0,
            pages: None,
            valid: false,
        }
    }

    /// A frame's commit size (0 if not a commit) and the running checksum
    /// after it, or `None` where the valid log ends.
    fn check_frame(&self, frame: &[u8], running: [u32; 2]) -> Option<(u32, [u32; 2])> {
        let word = |at: usize| {
            u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
        };
        let (page, commit) = (word(0), word(4));
        if page == 0 || [word(8), word(12)] != self.salts {
            return None;
        }
        let after = checksum(
            checksum(running, &frame[..8], self.big_endian),
            &frame[FRAME_HEADER..],
            self.big_endian,
        );
        (after == [word(16), word(20)]).then_some((commit, after))
    }

    /// How many committed frames the log holds.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The committed frames' pages, in log order, as (page number, bytes).
    fn committed<'a>(&self, wal: &'a [u8]) -> impl Iterator<Item = (usize, &'a [u8])> {
        let frame_len = FRAME_HEADER + self.page_size;
        wal.get(HEADER..)
            .unwrap_or_default()
            .chunks_exact(frame_len)
            .take(self.frames)
            .map(|frame| {
                let page = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                (page as usize, &frame[FRAME_HEADER..])
            })
    }

    /// The bytes to write into the `-wal` file, at the returned offset, to
    /// commit `new` over `old` (two images of the database with this log's
    /// page size): one frame per page that differs, the last a commit
    /// frame with `new`'s size. `None` when the images are the same. A log
    /// without a valid header is started afresh at offset 0 with new
    /// `salt` values, so nothing left in the file can be taken for a frame.
    pub fn append(&self, old: &[u8], new: &[u8], salt: [u32; 2]) -> Option<(usize, Vec<u8>)> {
        let ps = self.page_size;
        let old_pages = old.len() / ps;
        let new_pages = new.len() / ps;
        let mut changed: Vec<usize> = (0..new_pages)
            .filter(|&i| i >= old_pages || old[i * ps..(i + 1) * ps] != new[i * ps..(i + 1) * ps])
            .collect();
        if changed.is_empty() && new_pages == old_pages {
            return None;
        }
        if changed.is_empty() {
            // Only a truncation: page 1 carries the commit.
            changed.push(0);
        }
        let mut out = Vec::with_capacity(HEADER + changed.len() * (FRAME_HEADER + ps));
        let (offset, mut running, salts, big_endian) = if self.valid {
            let offset = HEADER + self.frames * (FRAME_HEADER + ps);
            (offset, self.checksum, self.salts, self.big_endian)
        } else {
            let header = Header::fresh(ps, self.checkpoint_sequence, salt);
            out.extend_from_slice(&header.bytes());
            (0, header.checksum, header.salts, false)
        };
        let commit_size = u32::try_from(new_pages).unwrap_or(u32::MAX);
        for (n, &i) in changed.iter().enumerate() {
            let page = &new[i * ps..(i + 1) * ps];
            let commit = if n + 1 == changed.len() {
                commit_size
            } else {
                0
            };
            let mut head = [0u8; FRAME_HEADER];
            head[..4].copy_from_slice(&u32::try_from(i + 1).unwrap_or(u32::MAX).to_be_bytes());
            head[4..8].copy_from_slice(&commit.to_be_bytes());
            head[8..12].copy_from_slice(&salts[0].to_be_bytes());
            head[12..16].copy_from_slice(&salts[1].to_be_bytes());
            running = checksum(checksum(running, &head[..8], big_endian), page, big_endian);
            head[16..20].copy_from_slice(&running[0].to_be_bytes());
            head[20..24].copy_from_slice(&running[1].to_be_bytes());
            out.extend_from_slice(&head);
            out.extend_from_slice(page);
        }
        Some((offset, out))
    }
}

/// The log's header, checked.
struct Header {
    big_endian: bool,
    page_size: usize,
    checkpoint_sequence: u32,
    salts: [u32; 2],
    checksum: [u32; 2],
}

impl Header {
    fn parse(wal: &[u8], page_size: usize) -> Option<Header> {
        let head = wal.get(..HEADER)?;
        let word =
            |at: usize| u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let big_endian = match word(0) {
            MAGIC_LE => false,
            MAGIC_BE => true,
            _ => return None,
        };
        let valid = word(4) == VERSION
            && word(8) as usize == page_size
            && checksum([0, 0], &head[..24], big_endian) == [word(24), word(28)];
        valid.then(|| Header {
            big_endian,
            page_size,
            checkpoint_sequence: word(12),
            salts: [word(16), word(20)],
            checksum: [word(24), word(28)],
        })
    }

    /// A new log's header (little-endian checksums, like SQLite on the
    /// machines inbox runs on; readers accept either).
    fn fresh(page_size: usize, checkpoint_sequence: u32, salts: [u32; 2]) -> Header {
        let mut header = Header {
            big_endian: false,
            page_size,
            checkpoint_sequence: checkpoint_sequence.wrapping_add(1),
            salts,
            checksum: [0, 0],
        };
        header.checksum = checksum([0, 0], &header.bytes()[..24], false);
        header
    }

    fn bytes(&self) -> [u8; HEADER] {
        let magic = if self.big_endian { MAGIC_BE } else { MAGIC_LE };
        let words = [
            magic,
            VERSION,
            u32::try_from(self.page_size).unwrap_or(0),
            self.checkpoint_sequence,
            self.salts[0],
            self.salts[1],
            self.checksum[0],
            self.checksum[1],
        ];
        let mut out = [0u8; HEADER];
        for (chunk, word) in out.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }
}

/// SQLite's log checksum: over 32-bit words in pairs, continuing from `s`.
fn checksum(s: [u32; 2], bytes: &[u8], big_endian: bool) -> [u32; 2] {
    let [mut s0, mut s1] = s;
    for pair in bytes.chunks_exact(8) {
        let word = |b: &[u8]| {
            let b = [b[0], b[1], b[2], b[3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        s0 = s0.wrapping_add(word(&pair[..4])).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..])).wrapping_add(s0);
    }
    [s0, s1]
}

/// The database as a reader sees it: `db` (the main file's bytes) with
/// every committed frame of `wal` (the `-wal` file's bytes, empty when
/// there is none) applied, at the size the last commit gave it.
pub fn committed_image(db: &[u8], wal: &[u8]) -> Result<(Vec<u8>, Log), FormatError> {
    let ps = page_size(db)?;
    let log = Log::parse(wal, ps);
    let mut image = db.to_vec();
    image.truncate(image.len() / ps * ps);
    for (page, bytes) in log.committed(wal) {
        let end = page * ps;
        if image.len() < end {
            image.resize(end, 0);
        }
        image[end - ps..end].copy_from_slice(bytes);
    }
    if let Some(pages) = log.pages {
        image.resize(pages as usize * ps, 0);
    }
    Ok((image, log))
}
