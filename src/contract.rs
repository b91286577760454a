//! Names shared by the writer (controller) and the readers (card server, directory) of the
//! published ConfigMaps: the contract of DESIGN.md §What the operator writes, in one place.

/// Field manager for server-side apply, and the value of the managed-by label.
pub const MANAGER: &str = "agentcard-operator";
/// Field manager AgentDiscovery writes the cards of running agents with: any other manager
/// (but [`MANAGER`]'s status writes) that edits such a card's spec claims it.
pub const DISCOVERY_MANAGER: &str = "agentcard-operator-discovery";
/// Label naming the AgentDiscovery that wrote a card.
pub const LABEL_DISCOVERED_BY: &str = "agentcard.dev/discovered-by";
/// Standard label marking objects this operator manages.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// What a published ConfigMap holds: [`CONTENT_CARD`] or [`CONTENT_JWKS`].
pub const LABEL_CONTENT: &str = "agentcard.dev/content";
/// [`LABEL_CONTENT`] value of a ConfigMap holding one published card.
pub const CONTENT_CARD: &str = "card";
/// [`LABEL_CONTENT`] value of the ConfigMap holding the JWKS (in the operator's namespace).
pub const CONTENT_JWKS: &str = "jwks";
/// [`LABEL_CONTENT`] value of a directory's change-feed log (in the operator's namespace,
/// written by the lease holder; its directory named by [`ANN_DIRECTORY`]).
pub const CONTENT_FEED: &str = "feed";
/// [`LABEL_CONTENT`] value of a further part of a change-feed log (named by
/// [`ANN_FEED_PART`]).
pub const CONTENT_FEED_PART: &str = "feed-part";
/// Annotation on a change-feed log part: its number (1..).
pub const ANN_FEED_PART: &str = "agentcard.dev/feed-part";
/// `binaryData` key of the change-feed log (gzip'd JSON).
pub const KEY_FEED: &str = "feed.json.gz";
/// Label selector for every ConfigMap the card server reads.
pub const PUBLISHED_SELECTOR: &str =
    "app.kubernetes.io/managed-by=agentcard-operator,agentcard.dev/content";

/// [`LABEL_CONTENT`] of the ConfigMap holding a card's extended card (served only to callers its
/// auth accepts, never listed).
pub const CONTENT_EXTENDED: &str = "extended-card";
/// ConfigMap key holding the exact extended card bytes (the file the agent mounts).
pub const KEY_EXTENDED: &str = "extended-agent-card.json";

/// ConfigMap key holding the exact card bytes served.
pub const KEY_CARD: &str = "agent-card.json";
/// ConfigMap key holding the JWKS bytes served.
pub const KEY_JWKS: &str = "jwks.json";

/// Annotation: the host the card is served for.
pub const ANN_HOST: &str = "agentcard.dev/host";
/// Annotation: the path prefix before `/.well-known/...` (empty or `/segment...`).
pub const ANN_PATH_PREFIX: &str = "agentcard.dev/path-prefix";
/// Annotation: `"true"` to also serve the legacy `/.well-known/agent.json`.
pub const ANN_LEGACY_PATH: &str = "agentcard.dev/legacy-path";
/// Annotation: hash of the served bytes (the ETag without quotes).
pub const ANN_CONTENT_HASH: &str = "agentcard.dev/content-hash";
/// Annotation: `Cache-Control` max-age in seconds.
pub const ANN_MAX_AGE: &str = "agentcard.dev/max-age";
/// Annotation: id of the key that signed the card.
pub const ANN_KEY_ID: &str = "agentcard.dev/key-id";
/// Annotation: RFC 3339 time the served bytes last changed (the `Last-Modified`).
pub const ANN_PUBLISHED_AT: &str = "agentcard.dev/published-at";

/// The entries of a comma-separated list, as the allowed-hosts annotation and the list flags
/// are written (`"a.example.com, *.team.example.com"`); empty entries dropped.
pub fn patterns(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether `host` matches the allowed-host pattern `pattern`: `*` (any), `*.example.com` (any name below), or exact.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// `Cache-Control` max-age when none is given.
pub const DEFAULT_MAX_AGE: u32 = 300;

/// The well-known path of A2A v0.3+ cards.
pub const PATH_CARD: &str = "/.well-known/agent-card.json";
/// The legacy well-known path of A2A v0.1–v0.2 cards.
pub const PATH_LEGACY: &str = "/.well-known/agent.json";
/// The path of the JWKS named by signatures' `jku`.
pub const PATH_JWKS: &str = "/.well-known/jwks.json";
/// Path of a host's did:web document (the ES256 signing keys), at the host's root only.
pub const PATH_DID: &str = "/.well-known/did.json";
/// The A2A REST binding's `GetExtendedAgentCard` path, under an interface's URL path.
pub const PATH_EXTENDED: &str = "/extendedAgentCard";
/// The A2A REST binding's name (`protocolBinding`).
pub const BINDING_REST: &str = "HTTP+JSON";

/// Namespace annotation (set by cluster admins): more host patterns the namespace's cards may
/// publish on, comma-separated.
pub const ANN_ALLOWED_HOSTS: &str = "agentcard.dev/allowed-hosts";

/// Annotation on what routes a directory's host (in the operator's namespace), naming the
/// AgentDirectory.
pub const ANN_DIRECTORY: &str = "agentcard.dev/directory";

/// Annotation on written objects naming the AgentCard they belong to (`namespace/name`; an
/// annotation because card names may be longer than a label value).
pub const ANN_CARD: &str = "agentcard.dev/card";

/// The namespace and name an [`ANN_CARD`] value names (`namespace/name`), or `None` when it
/// names no card. The one reader of that annotation: what names a card in another namespace
/// is judged by whoever calls this (see the route watches and the sweep).
pub fn annotated_card(value: &str) -> Option<(&str, &str)> {
    value
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
}
/// Label on written objects holding the uid of the AgentCard they belong to.
pub const LABEL_CARD_UID: &str = "agentcard.dev/card-uid";

/// Name of the ConfigMap holding the card of the AgentCard `name` (in the card's namespace):
/// `agentcard-<name>`, shortened with a hash suffix when that exceeds the 253-character limit.
pub fn card_configmap_name(card_name: &str) -> String {
    bounded_name(&format!("agentcard-{card_name}"), card_name, 253)
}

/// Name of the ConfigMap holding the extended card of the AgentCard `name` (in the card's
/// namespace): `extended-agentcard-<name>`, shortened like [`card_configmap_name`]. It starts
/// unlike every `agentcard-…` name, so no card's public ConfigMap can take another's extended
/// one's name.
pub fn extended_configmap_name(card_name: &str) -> String {
    bounded_name(&format!("extended-agentcard-{card_name}"), card_name, 253)
}

/// `readable` when it fits in `max` characters, else its head plus `-` and 8 hex digits of the
/// hash of `identity`. The result is a DNS subdomain when `readable` is one.
pub fn bounded_name(readable: &str, identity: &str, max: usize) -> String {
    if readable.len() <= max {
        return readable.to_string();
    }
    hashed_name(readable, identity, max)
}

/// The head of `readable` (at most `max - 9` characters, ending alphanumeric) plus `-` and 8
/// hex digits of the hash of `identity`: always distinct for distinct identities (up to the
/// hash), always within `max`.
pub fn hashed_name(readable: &str, identity: &str, max: usize) -> String {
    hashed_name_with(readable, identity, max, 8)
}

/// [`hashed_name`] with `digits` (at most 32) hex digits of the hash. Names in the operator's
/// namespace use 16: there identities come from tenants of different namespaces, and one must
/// not find a name colliding with another's by trying 2³² of its own.
pub fn hashed_name_with(readable: &str, identity: &str, max: usize, digits: usize) -> String {
    let hash = content_hash(identity.as_bytes());
    let suffix = &hash[..digits.min(hash.len())];
    let keep = max.saturating_sub(suffix.len() + 1);
    let head: String = readable.chars().take(keep).collect();
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{head}-{suffix}")
}

/// Normalise a path prefix, as written in `spec.publish.pathPrefix` or the prefix annotation:
/// `""`, or `/a/b` with one leading and no trailing slash.
pub fn normalize_prefix(p: &str) -> String {
    let trimmed = p.trim().trim_matches('/');
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("/{trimmed}")
    }
}

/// Strong ETag value (without quotes) of served bytes: the first 32 hex digits of SHA-256.
pub fn content_hash(bytes: &[u8]) -> String {
    content_digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The 16 bytes [`content_hash`] writes in hex: what a holder of many hashes keeps (16 bytes
/// inline, where the hex is a 32-byte allocation and its 24-byte `String`).
pub fn content_digest(bytes: &[u8]) -> [u8; 16] {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut out = [0; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// Whether `hash` (as a status or an annotation names it) is the [`content_hash`] of the bytes
/// whose [`content_digest`] is `digest`: exactly its 32 lower-case hex digits.
pub fn is_content_hash(hash: &str, digest: &[u8; 16]) -> bool {
    let hex = hash.as_bytes();
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    hex.len() == 32
        && digest.iter().enumerate().all(|(i, &d)| {
            digit(hex[2 * i])
                .zip(digit(hex[2 * i + 1]))
                .is_some_and(|(hi, lo)| hi << 4 | lo == d)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_hash_names_its_digest_exactly() {
        let digest = content_digest(b"{\"name\":\"x\"}");
        let hash = content_hash(b"{\"name\":\"x\"}");
        assert_eq!(hash.len(), 32);
        assert!(is_content_hash(&hash, &digest));
        // Another digit, upper case, a prefix, a longer string or another digest: not it.
        let mut other = hash.clone().into_bytes();
        other[31] = if other[31] == b'0' { b'1' } else { b'0' };
        let other = String::from_utf8(other).unwrap_or_default();
        for wrong in [
            other.as_str(),
            &hash.to_uppercase(),
            &hash[..31],
            &format!("{hash}0"),
            "",
        ] {
            assert!(!is_content_hash(wrong, &digest), "{wrong}");
        }
        assert!(!is_content_hash(&hash, &content_digest(b"{}")));
    }
}
