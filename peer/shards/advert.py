"""What `GET /v1/shards` says: the manifest a peer holds, and which of its shards, as a bitmap.

    {"manifests": [{"hash": "<manifest sha256>", "have": "<hex>",
                    "signed": {"hash": "<document sha256>", "signer": "<key hex>", "version": N}}]}

Bit i (most significant bit first) of `have` says whether the peer holds the i-th shard in
manifest order (sorted by name): 65,536 shards take 16 kB of hex instead of 4 MB of hashes,
and every neighbour is asked every `advert_every_s`. Pure: both sides know the order from
the manifest, and a bitmap of the wrong length is refused. `signed` is there when the peer
holds a signed document for that manifest (`peer.shards.signed`): a peer that trusts the
signer fetches the document by its hash (`GET /v1/shards/<document sha256>`) and checks the
signature itself; what the advert claims only decides what is worth fetching.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_HEX_RE = re.compile(r"[0-9a-fA-F]*")


class SignedOffer(NamedTuple):
    """A signed manifest a neighbour says it serves: the document's hash, its signer and version."""

    hash: str
    signer: str
    version: int


def encode_have(order: list[str], held: set[str]) -> str:
    bits = bytearray((len(order) + 7) // 8)
    for i, shard in enumerate(order):
        if shard in held:
            bits[i // 8] |= 0x80 >> (i % 8)
    return bits.hex()


def decode_have(order: list[str], text: str) -> set[str]:
    """The shards a bitmap names; ValueError if it is not hex of exactly the manifest's length."""
    if not isinstance(text, str) or len(text) != 2 * ((len(order) + 7) // 8) or not _HEX_RE.fullmatch(text):
        # (fromhex alone would skip spaces: "ff  " would pass the length check and decode to 1 byte)
        raise ValueError(f"a shard bitmap for {len(order)} shards is {2 * ((len(order) + 7) // 8)} hex digits")
    bits = bytes.fromhex(text)
    return {shard for i, shard in enumerate(order) if bits[i // 8] & (0x80 >> (i % 8))}


def advert_body(manifest_hash: str, order: list[str], held: set[str], signed: SignedOffer | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"hash": manifest_hash, "have": encode_have(order, held)}
    if signed is not None:
        entry["signed"] = signed._asdict()
    return {"manifests": [entry]}


def parse_advert(doc: Any, manifest_hash: str, order: list[str]) -> set[str]:
    """The shards of our manifest an advert says its peer holds (none if it holds another);
    ValueError for a malformed one."""
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(manifests, list):
        raise ValueError("an advert needs a 'manifests' list")
    for m in manifests:
        if isinstance(m, dict) and m.get("hash") == manifest_hash:
            return decode_have(order, m.get("have"))
    return set()


def signed_offers(doc: Any, signer: str) -> list[SignedOffer]:
    """The signed manifests by `signer` (hex) an advert offers; entries naming another signer, or
    malformed ones, are left out (nothing is fetched for them)."""
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    offers = []
    for m in manifests if isinstance(manifests, list) else []:
        s = m.get("signed") if isinstance(m, dict) else None
        if not isinstance(s, dict) or s.get("signer") != signer:
            continue
        digest, version = s.get("hash"), s.get("version")
        if isinstance(digest, str) and _HEX64_RE.fullmatch(digest) and isinstance(version, int) \
                and not isinstance(version, bool) and version > 0:
            offers.append(SignedOffer(digest, signer, version))
    return offers
