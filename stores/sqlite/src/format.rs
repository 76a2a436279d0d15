//! Facts of SQLite's file format that inbox reads from a file's bytes
//! (portable: the wasm host reads them from a file it is given). This
//! module must never write a file: SQLite writes its files.

/// Whether the first bytes of a database file (its 100-byte header) say
/// WAL mode: bytes 18 and 19, the file format's write and read versions,
/// are 2. Such a file's latest commits may be in its `-wal`, beside it.
pub fn is_wal_header(header: &[u8]) -> bool {
    header.len() >= 20 && header[18] == 2 && header[19] == 2
}

#[cfg(test)]
mod tests {
    use super::is_wal_header;

    #[test]
    fn wal_mode_is_bytes_18_and_19_of_the_header() {
        let mut header = vec![0u8; 100];
        assert!(!is_wal_header(&header));
        header[18] = 2;
        header[19] = 2;
        assert!(is_wal_header(&header));
        header[19] = 1;
        assert!(!is_wal_header(&header));
        assert!(!is_wal_header(&header[..19]));
    }
}
