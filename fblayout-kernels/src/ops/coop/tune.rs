//! The autotune's results, kept per adapter beside the pipeline cache.
//!
//! A [`TuneTable`] maps a problem (the operands' staging orders, the accumulator, the batch
//! and `m`, `n`, `k`) to the configuration that ran fastest on it. It is saved as text lines
//! `problem<TAB>configuration` inside the pipeline cache's checksummed envelope, in a file of
//! its own keyed by the same adapter, driver and crate version. A file that fails the envelope
//! or has a line that does not parse is reported as [`CacheLoad::Rebuilt`] and ignored; the
//! autotune then measures again and the next save replaces it.

use std::collections::BTreeMap;

use super::config::CoopConfig;
use crate::runtime::{CacheLoad, DiskCache};

/// The stem of the autotune file's name. It names the kernel generator's generation (`k4`:
/// vector-wide staging, offsets stepped along `k`, unmasked loads for whole k-steps, subgroup
/// barriers around the subgroups' scratch), so that choices timed on an older generation's
/// kernels are measured again rather than reused.
pub(crate) const STEM: &str = "coop-autotune-k4";

/// Problems and the configuration chosen for each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TuneTable {
    pub(super) entries: BTreeMap<String, CoopConfig>,
}

impl TuneTable {
    /// The text form: one `problem<TAB>configuration` line per entry.
    fn encode(&self) -> Vec<u8> {
        let mut text = String::new();
        for (problem, config) in &self.entries {
            text.push_str(problem);
            text.push('\t');
            text.push_str(&config.to_string());
            text.push('\n');
        }
        text.into_bytes()
    }

    /// Reads the text form; `Err` says what does not parse.
    fn decode(data: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(data).map_err(|_| "it is not UTF-8 text".to_owned())?;
        let mut entries = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let (problem, config) = line
                .split_once('\t')
                .ok_or_else(|| format!("line {} has no tab", n + 1))?;
            let config = config
                .parse::<CoopConfig>()
                .map_err(|e| format!("line {}: {e}", n + 1))?;
            entries.insert(problem.to_owned(), config);
        }
        Ok(Self { entries })
    }

    /// The table in `disk`, or an empty one and why.
    pub(super) fn load(disk: &DiskCache) -> (Self, CacheLoad) {
        match disk.load() {
            (Some(data), loaded) => match Self::decode(&data) {
                Ok(table) => (table, loaded),
                Err(reason) => (Self::default(), CacheLoad::Rebuilt { reason }),
            },
            (None, status) => (Self::default(), status),
        }
    }

    /// Writes the table into `disk` (atomically).
    pub(super) fn save(&self, disk: &DiskCache) -> std::io::Result<()> {
        disk.save(&self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fblayout-coop-tune-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_saved_table_loads_back_and_a_corrupt_one_is_rebuilt() {
        let dir = temp_dir("roundtrip");
        let disk = DiskCache::new(&dir, "adapter A".into()).sibling(STEM);
        assert_eq!(TuneTable::load(&disk).1, CacheLoad::Empty);
        let mut table = TuneTable::default();
        table.entries.insert(
            "OuterRows,KRows|f32|b1 m4096 n4096 k4096".into(),
            CoopConfig::DEFAULT,
        );
        table
            .entries
            .insert("KRows,KRows|f32|b1 m64 n64 k64".into(), CoopConfig::SMALL);
        table.save(&disk).unwrap();
        let (back, status) = TuneTable::load(&disk);
        assert_eq!(back, table);
        assert!(matches!(status, CacheLoad::Loaded { .. }), "{status:?}");

        // Flipped bits fail the checksum: the table is rebuilt, never trusted.
        let mut raw = std::fs::read(&disk.path).unwrap();
        let last = raw.len() - 2;
        raw[last] ^= 0x20;
        std::fs::write(&disk.path, &raw).unwrap();
        let (empty, status) = TuneTable::load(&disk);
        assert!(empty.entries.is_empty());
        assert!(
            matches!(&status, CacheLoad::Rebuilt { reason } if reason.contains("checksum")),
            "{status:?}"
        );
        // A well-formed envelope around text that is no table is rebuilt too.
        disk.save(b"OuterRows\t128x128/4x4\n").unwrap();
        let (empty, status) = TuneTable::load(&disk);
        assert!(empty.entries.is_empty());
        assert!(matches!(status, CacheLoad::Rebuilt { .. }), "{status:?}");
        // And the next save replaces it.
        table.save(&disk).unwrap();
        assert_eq!(TuneTable::load(&disk).0, table);
        // The pipeline cache of the same adapter is another file.
        assert_ne!(disk.path, DiskCache::new(&dir, "adapter A".into()).path);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
