//! Opaque page tokens: what a client hands back to get the next page. Cursors of identifier
//! ordered listings name the last identifier seen (stable while entries come and go); tokens
//! of ranked results carry an offset.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

fn encode(kind: char, value: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{kind}:{value}"))
}

fn decode(kind: char, token: &str) -> Option<String> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(token.trim()).ok()?).ok()?;
    let (k, v) = raw.split_once(':')?;
    (k.len() == 1 && k.starts_with(kind)).then(|| v.to_string())
}

/// A token for the page starting at `offset`.
pub fn encode_offset(offset: usize) -> String {
    encode('o', &offset.to_string())
}

/// The offset of a token made by [`encode_offset`].
pub fn decode_offset(token: &str) -> Option<usize> {
    decode('o', token)?.parse().ok()
}

/// A cursor for the page after `identifier`.
pub fn encode_after(identifier: &str) -> String {
    encode('a', identifier)
}

/// The identifier of a cursor made by [`encode_after`].
pub fn decode_after(token: &str) -> Option<String> {
    decode('a', token).filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_do_not_mix() {
        assert_eq!(decode_offset(&encode_offset(40)), Some(40));
        let id = "urn:air:h.example:ns:name";
        assert_eq!(decode_after(&encode_after(id)).as_deref(), Some(id));
        assert_eq!(decode_offset(&encode_after(id)), None);
        assert_eq!(decode_after("%%%"), None);
    }
}
