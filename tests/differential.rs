//! Differential test: our canonical bytes against the Python SDK's for generated cards.

mod support;

use agentcard_operator::a2a::canonical::canonical_bytes;
use agentcard_operator::a2a::parse::{card_from_value, Strictness};

#[test]
fn canonical_bytes_equal_the_python_sdks_for_1000_generated_cards() {
    let cards = support::cards::sample(1000);
    let theirs = support::sdk_canonical(&cards);
    let mut compared = 0;
    for (i, (card, theirs)) in cards.iter().zip(theirs).enumerate() {
        let ours = card_from_value(card, Strictness::Strict)
            .unwrap_or_else(|e| panic!("card {i} does not parse: {e}\n{card}"));
        let theirs = theirs.unwrap_or_else(|e| panic!("the SDK rejected card {i}: {e}\n{card}"));
        let ours = canonical_bytes(&ours.card);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "card {i} canonicalises differently:\n{card}"
        );
        compared += 1;
    }
    assert_eq!(compared, 1000);
}
