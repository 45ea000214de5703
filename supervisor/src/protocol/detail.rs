//! The `detail` of an `ok` response: one type per request, written by the supervisor and read by
//! the host. The host knows which request an `ok` answers, so it reads the detail as that
//! request's type ([`OkDetail::read`]); the wire carries the type's fields and nothing else.
//!
//! A detail is written through a JSON value ([`OkDetail::of`]), so its keys come in sorted order,
//! as they did when the supervisor built details as JSON values; the fields are declared in that
//! order too.

use super::status::ClaimStatus;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A type that is the `detail` of an `ok` answering one request.
pub trait OkReply: Serialize + DeserializeOwned {}

/// The `detail` of an `ok` response: made from an [`OkReply`] ([`OkDetail::of`]), read back as
/// one ([`OkDetail::read`]). On the wire it is the reply's JSON (`null` for [`OkDetail::none`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OkDetail(serde_json::Value);

impl OkDetail {
    /// The detail of `reply`.
    pub fn of<T: OkReply>(reply: &T) -> OkDetail {
        // The replies are plain structs of strings, numbers and maps with string keys.
        OkDetail(serde_json::to_value(reply).unwrap_or_default())
    }

    /// No detail (`null`): `release`.
    pub fn none() -> OkDetail {
        OkDetail(serde_json::Value::Null)
    }

    /// The detail read as the reply of the request it answers.
    pub fn read<T: OkReply>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.0)
    }

    /// The detail as JSON (for logs).
    pub fn as_json(&self) -> &serde_json::Value {
        &self.0
    }
}

impl std::fmt::Display for OkDetail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// `set_manifest`: how many trees and pinned files the manifest holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestSet {
    /// Pinned files.
    pub files: u64,
    /// Trees.
    pub trees: u64,
}
impl OkReply for ManifestSet {}

/// `add_listing`: how much of the tree's listing has come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingAdded {
    /// The tree's last part came.
    pub complete: bool,
    /// Directories listed so far.
    pub dirs: u64,
    /// Files listed so far.
    pub files: u64,
    /// The listing is the one the supervisor holds for the tree's path (`held_listing`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// The tree.
    pub tree: String,
}
impl OkReply for ListingAdded {}

/// `upload`: where the tree went and how long it took, with the unpack's counts (`files`,
/// `dirs`, `bytes`, and for an offered upload what was reused), which the unpack defines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uploaded {
    /// The tree's destination.
    #[serde(default)]
    pub dest: Option<String>,
    /// How long the upload took on the supervisor's side.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// The unpack's counts.
    #[serde(flatten)]
    pub counts: serde_json::Map<String, serde_json::Value>,
}
impl OkReply for Uploaded {}

impl std::fmt::Display for Uploaded {
    /// The detail's JSON, as the supervisor sent it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        OkDetail::of(self).fmt(f)
    }
}

/// `signal`: whether an agent was running to receive it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signalled {
    /// An agent was running and its process group was signalled.
    pub delivered: bool,
    /// The signal's name.
    pub signal: String,
}
impl OkReply for Signalled {}

/// `cancel`: whether an iteration was running, and whether the run was ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// An iteration was running and is being cancelled.
    pub cancelled: bool,
    /// The run holding the sandbox was ended (`cancel` with `run`).
    #[serde(default)]
    pub run_stopped: bool,
}
impl OkReply for Cancelled {}

/// `claim`: the claim as the supervisor keeps it, and the listings it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    /// The claim.
    pub claim: ClaimStatus,
    /// The destinations the supervisor holds an offered listing for, each with that listing's
    /// SHA-256 (lowercase hex): what an `upload` naming its listing by digest could be spared
    /// (`upload.listing_digest`). Only the claiming connection uploads from now on, so a host
    /// that finds its destination absent here sends its listing without naming it first, as it
    /// makes it. Absent from older supervisors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_listings: Option<std::collections::BTreeMap<String, String>>,
}
impl OkReply for Claimed {}

/// `renew`: the lease renewed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    /// The lease, in milliseconds.
    pub lease_ms: u64,
}
impl OkReply for Renewed {}

/// `collected`: how many iterations were named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectedAck {
    /// How many.
    pub collected: u64,
}
impl OkReply for CollectedAck {}

/// `collect`: the iteration sent and the bytes of its tar stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectSent {
    /// The tar stream's bytes.
    pub bytes: u64,
    /// The iteration.
    pub iteration: u32,
}
impl OkReply for CollectSent {}

/// `shutdown`: the supervisor stopped everything and exits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutDown {
    /// Always true.
    pub stopped: bool,
}
impl OkReply for ShutDown {}

/// `release`: nothing (`null`).
impl OkReply for () {}
