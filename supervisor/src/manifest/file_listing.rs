//! [`FileListing`]: a tree's expected per-file listing, compact in memory and the usual JSON
//! array on the wire.

use super::is_sha256_hex;
use crate::tree_hash::FileRecord;
use serde::{Deserialize, Serialize};

/// A tree's expected per-file listing, held compactly because the supervisor keeps it in
/// memory for the whole life of the sandbox: names in one string, digests as 32 raw bytes. A
/// 20,000-file tree costs about 1.4 MB instead of about 3.7 MB as `Vec<FileRecord>`, which keeps
/// `pitcrew-init` small while the agent runs. On the wire it is the same JSON array of
/// `{path, sha256, size}` objects (`docs/manifest.md`), parsed element by element.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileListing {
    names: String,
    ends: Vec<u32>,
    digests: Vec<[u8; 32]>,
    sizes: Vec<u64>,
}

impl FileListing {
    /// Builds a listing; fails on a digest that is not 64 lowercase hex digits.
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = &'a FileRecord>,
    ) -> Result<FileListing, String> {
        let mut listing = FileListing::default();
        for record in records {
            listing.push(record)?;
        }
        Ok(listing)
    }

    fn push(&mut self, record: &FileRecord) -> Result<(), String> {
        let mut digest = [0u8; 32];
        if !is_sha256_hex(&record.sha256)
            || hex::decode_to_slice(&record.sha256, &mut digest).is_err()
        {
            return Err(format!(
                "file {:?}: sha256 is not 64 lowercase hex digits",
                record.path
            ));
        }
        self.names.push_str(&record.path);
        let end = u32::try_from(self.names.len())
            .map_err(|_| "the listing's names exceed 4 GiB".to_string())?;
        self.ends.push(end);
        self.digests.push(digest);
        self.sizes.push(record.size);
        Ok(())
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the listing is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The file records, in listing order (each allocates its strings).
    pub fn records(&self) -> impl Iterator<Item = FileRecord> + '_ {
        let mut start = 0;
        (0..self.len()).map(move |i| {
            let end = self.ends[i] as usize;
            let record = FileRecord {
                path: self.names[start..end].to_string(),
                sha256: hex::encode(self.digests[i]),
                size: self.sizes[i],
            };
            start = end;
            record
        })
    }

    /// The file records, in listing order (allocates: for drift reports and serialization).
    pub fn to_records(&self) -> Vec<FileRecord> {
        self.records().collect()
    }
}

impl Serialize for FileListing {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for record in self.records() {
            seq.serialize_element(&record)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for FileListing {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FileListing;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of {path, sha256, size}")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<FileListing, A::Error> {
                let mut listing = FileListing::default();
                while let Some(record) = seq.next_element::<FileRecord>()? {
                    listing.push(&record).map_err(serde::de::Error::custom)?;
                }
                Ok(listing)
            }
        }
        deserializer.deserialize_seq(Visitor)
    }
}
