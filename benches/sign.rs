//! Canonicalise + sign + serialise one card, per vector card and per algorithm:
//! `cargo bench --bench sign`.

use agentcard_operator::a2a::jws::sign_card;
use agentcard_operator::a2a::publish::{published_bytes, PublishOptions};
use agentcard_operator::a2a::{AgentCard, Algorithm, SigningKey};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn bench(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/a2a-vectors/cards");
    let cards: Vec<(&str, AgentCard)> = ["v1-minimal", "v1-full", "spec-8.5-sample"]
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(format!("{name}.card.json"))).expect("vector card");
            (
                name,
                AgentCard::from_json_lenient(&bytes).expect("vector card parses"),
            )
        })
        .collect();
    let mut group = c.benchmark_group("sign_card");
    for alg in Algorithm::ALL {
        let key = [SigningKey::generate(alg, Some("bench")).expect("key")];
        for (name, card) in &cards {
            group.bench_with_input(BenchmarkId::new(alg.name(), name), card, |b, card| {
                b.iter(|| {
                    let signed =
                        sign_card(card, &key, Some("https://a.example/.well-known/jwks.json"))
                            .expect("sign");
                    published_bytes(&signed, PublishOptions::default()).expect("serialise")
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
