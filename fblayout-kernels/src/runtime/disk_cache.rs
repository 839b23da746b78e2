//! Compiled pipelines on disk, so the second run of a program starts fast.
//!
//! On backends whose drivers can export their compiled pipelines (Vulkan, through wgpu's
//! `PIPELINE_CACHE` feature) the [`Gpu`](super::Gpu) loads a cache file when it opens and
//! writes it back when asked ([`Gpu::save_pipeline_cache`](super::Gpu::save_pipeline_cache))
//! and when it is dropped. The driver's cache covers every pipeline compiled on that device, so
//! its entries are keyed by the kernels and layouts themselves (their WGSL); the file is keyed
//! by adapter, driver and driver version, and by this crate's version.
//!
//! The file is an envelope around wgpu's bytes: a magic number, the key, the length and an
//! FNV-1a checksum of key and data. Anything that does not match (a truncated write, another
//! adapter's file under this name, flipped bits) is reported as [`CacheLoad::Rebuilt`] and
//! never handed to the driver; the cache then starts empty and the file is replaced on the
//! next save. Saves write a temporary file and rename it over the old one, so a crash leaves
//! the previous file whole.
//!
//! The envelope is public ([`DiskCache::at`]) for other per-device caches, such as the
//! planner's calibration: each names its own file and key.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"FBLPIPE\x01";

/// What happened to the pipeline cache file when the device opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheLoad {
    /// No cache directory was configured, or the feature is turned off.
    Off,
    /// The backend or adapter has no pipeline cache.
    Unsupported,
    /// There was no file yet.
    Empty,
    /// A valid file was loaded.
    Loaded {
        /// Its size in bytes.
        bytes: u64,
    },
    /// The file was unusable and is ignored; it is rebuilt on the next save.
    Rebuilt {
        /// Why it was ignored.
        reason: String,
    },
}

/// Where one device's cache lives and what it is keyed by: a file in the checksummed envelope
/// of the module docs.
#[derive(Debug, Clone)]
pub struct DiskCache {
    pub(crate) path: PathBuf,
    key: String,
}

/// The cache key of an adapter: wgpu's key plus the driver and this crate's version, or `None`
/// where wgpu has no pipeline cache for the backend.
pub(crate) fn key(info: &wgpu::AdapterInfo) -> Option<String> {
    let wgpu_key = wgpu::util::pipeline_cache_key(info)?;
    Some(format!(
        "{wgpu_key}|{}|{}|{}|fblayout-kernels {}",
        info.name,
        info.driver,
        info.driver_info,
        env!("CARGO_PKG_VERSION")
    ))
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

impl DiskCache {
    /// The cache of the adapter with `key`, in `dir`.
    pub(crate) fn new(dir: &Path, key: String) -> Self {
        Self::named(dir, "pipelines", key)
    }

    /// A file `<stem>-<hash of key>.bin` in `dir` in the same envelope.
    fn named(dir: &Path, stem: &str, key: String) -> Self {
        let file = format!("{stem}-{:016x}.bin", fnv1a(&[key.as_bytes()]));
        Self::at(dir.join(file), key)
    }

    /// A cache in the file `path` keyed by `key` (what the data is valid for: adapter,
    /// driver, versions). A file written under another key is rebuilt, not trusted.
    pub fn at(path: PathBuf, key: String) -> Self {
        Self { path, key }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another file of the same adapter beside this one, `<stem>-<hash>.bin`, keyed by this
    /// file's key and `stem` (for what the crate measured on the adapter, such as autotune
    /// results).
    pub(crate) fn sibling(&self, stem: &str) -> Self {
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        Self::named(dir, stem, format!("{}|{stem}", self.key))
    }

    /// Reads the file: its data when the envelope checks out.
    pub fn load(&self) -> (Option<Vec<u8>>, CacheLoad) {
        let raw = match fs::read(&self.path) {
            Ok(raw) => raw,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return (None, CacheLoad::Empty);
            }
            Err(err) => {
                return (
                    None,
                    CacheLoad::Rebuilt {
                        reason: format!("it could not be read: {err}"),
                    },
                );
            }
        };
        match self.open(&raw) {
            Ok(data) => {
                let bytes = data.len() as u64;
                (Some(data.to_vec()), CacheLoad::Loaded { bytes })
            }
            Err(reason) => (None, CacheLoad::Rebuilt { reason }),
        }
    }

    /// Checks the envelope of `raw`; returns the data inside.
    fn open<'a>(&self, raw: &'a [u8]) -> Result<&'a [u8], String> {
        let take = |at: usize, n: usize| {
            raw.get(at..at + n)
                .ok_or_else(|| "the file is truncated".to_owned())
        };
        if take(0, 8)? != MAGIC {
            return Err("it is not an fblayout cache file".into());
        }
        let key_len = u32::from_le_bytes(take(8, 4)?.try_into().expect("4 bytes")) as usize;
        let key = take(12, key_len)?;
        if key != self.key.as_bytes() {
            return Err("it was written for another adapter, driver or version".into());
        }
        let at = 12 + key_len;
        let data_len = u64::from_le_bytes(take(at, 8)?.try_into().expect("8 bytes"));
        let checksum = u64::from_le_bytes(take(at + 8, 8)?.try_into().expect("8 bytes"));
        let data_len = usize::try_from(data_len).map_err(|_| "its length is corrupt".to_owned())?;
        let data = take(at + 16, data_len)?;
        if raw.len() != at + 16 + data_len {
            return Err("it is longer than its header says".into());
        }
        if fnv1a(&[key, data]) != checksum {
            return Err("its checksum does not match (the file is corrupt)".into());
        }
        Ok(data)
    }

    /// Writes `data` atomically: a temporary file, then a rename over the old one.
    pub fn save(&self, data: &[u8]) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        let key = self.key.as_bytes();
        let mut raw = Vec::with_capacity(data.len() + key.len() + 32);
        raw.extend_from_slice(MAGIC);
        raw.extend_from_slice(&(key.len() as u32).to_le_bytes());
        raw.extend_from_slice(key);
        raw.extend_from_slice(&(data.len() as u64).to_le_bytes());
        raw.extend_from_slice(&fnv1a(&[key, data]).to_le_bytes());
        raw.extend_from_slice(data);
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(&raw)?;
            file.sync_all()?;
        }
        fs::rename(&tmp, &self.path)
    }
}

/// The default cache directory: `$FBLAYOUT_CACHE_DIR` (`off` for none), else
/// `$XDG_CACHE_HOME/fblayout`, else `$HOME/.cache/fblayout`.
pub fn default_cache_dir() -> Option<PathBuf> {
    match std::env::var_os("FBLAYOUT_CACHE_DIR") {
        Some(v) if v == "off" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("fblayout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fblayout-disk-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_saved_cache_loads_back() {
        let dir = temp_dir("roundtrip");
        let cache = DiskCache::new(&dir, "adapter A".into());
        assert_eq!(cache.load().1, CacheLoad::Empty);
        cache.save(b"driver bytes").unwrap();
        let (data, status) = cache.load();
        assert_eq!(data.as_deref(), Some(&b"driver bytes"[..]));
        assert_eq!(status, CacheLoad::Loaded { bytes: 12 });
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_truncated_and_foreign_files_are_rebuilt_not_trusted() {
        let dir = temp_dir("corrupt");
        let cache = DiskCache::new(&dir, "adapter A".into());
        cache.save(b"driver bytes").unwrap();
        let good = fs::read(&cache.path).unwrap();
        let rebuilt = |bytes: &[u8]| {
            fs::write(&cache.path, bytes).unwrap();
            match cache.load() {
                (None, CacheLoad::Rebuilt { reason }) => reason,
                other => panic!("expected a rebuild, got {other:?}"),
            }
        };
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(rebuilt(&flipped).contains("checksum"));
        assert!(rebuilt(&good[..good.len() - 3]).contains("truncated"));
        assert!(rebuilt(b"garbage").contains("truncated") || rebuilt(b"garbage!").contains("not"));
        let mut longer = good.clone();
        longer.push(0);
        assert!(rebuilt(&longer).contains("longer"));
        // The same file under another adapter's key is not used.
        fs::write(&cache.path, &good).unwrap();
        let other = DiskCache {
            path: cache.path.clone(),
            key: "adapter B".into(),
        };
        assert!(matches!(other.load(), (None, CacheLoad::Rebuilt { .. })));
        let _ = fs::remove_dir_all(&dir);
    }
}
