//! Texts made by mutating well-formed ones (a byte changed, removed or inserted, a
//! snippet spliced in), the same on every run: what the hand readers' tests hold to
//! serde_json's reading.

/// xorshift64: the same cases on every run.
struct Rng(u64);

impl Rng {
    fn step(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.step() % n as u64) as usize
    }
}

/// The bytes an edit writes: JSON's punctuation, digits, letters of its literals and
/// exponents, whitespace, a control character, UTF-8 and a byte UTF-8 never has.
const BYTES: &[u8] = b"{}[]\"\\:,019-.eE+tfnux _\n\x01\xc3\xa9\xff";

/// Snippets every reader's mutants draw from besides its own: escapes (a cut one, a lone
/// surrogate, a pair), brackets, numbers at serde_json's edges, a quote.
const COMMON: &[&str] = &[
    "\\u00",
    "\\ud800",
    "\\ud83d\\ude00",
    "[",
    "]",
    "1e400",
    "18446744073709551616",
    "-0",
    "01",
    "\"",
];

/// Chunks of an OpenAI chat stream: the first (the model, no text), the usage chunk
/// `include_usage` adds (no choice), and one with text that needs escapes.
pub const CHAT_CHUNKS: &[&str] = &[
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[ ],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0}}}"#,
    r#"{"choices":[{"delta":{"content":"Hi \"there\"\n"}}],"model":"m","usage":{"prompt_tokens":1}}"#,
];

/// `bases` each read by the hand reader, and `n` mutants of them, one to three edits
/// each (a byte changed, removed or inserted, a snippet of `snippets` or [`COMMON`]
/// spliced in): `check` holds the hand reader to serde_json's reading and says whether
/// the hand read it. At least one mutant in twenty must be read by hand (else the
/// mutants test nothing but the fallback).
pub fn check_mutants(
    bases: &[&str],
    snippets: &[&str],
    n: usize,
    mut check: impl FnMut(&[u8]) -> bool,
) {
    for b in bases {
        assert!(check(b.as_bytes()), "not read by hand: {b}");
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut by_hand = 0;
    for _ in 0..n {
        let mut b = bases[rng.below(bases.len())].as_bytes().to_vec();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(b.len() + 1);
            match rng.below(4) {
                0 if at < b.len() => b[at] = BYTES[rng.below(BYTES.len())],
                1 if at < b.len() => {
                    b.remove(at);
                }
                2 => b.insert(at, BYTES[rng.below(BYTES.len())]),
                _ => {
                    let pick = rng.below(snippets.len() + COMMON.len());
                    let s = snippets
                        .get(pick)
                        .unwrap_or_else(|| &COMMON[pick - snippets.len()]);
                    b.splice(at..at, s.bytes());
                }
            }
        }
        by_hand += usize::from(check(&b));
    }
    assert!(by_hand > n / 20, "{by_hand} of {n} read by hand");
}
