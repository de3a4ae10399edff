// auth.h: who may join a job's TCP rendezvous (comm/tcp.cpp, and NCCL's
// bootstrap in comm.cpp when a key is given).
//
// Every rank holds the job's key (LOOMRT_JOB_KEY, or the file named by
// LOOMRT_JOB_KEY_FILE that only its owner can read). A connection is
// accepted only after both ends prove they hold it: each sends a fresh
// random nonce, then an HMAC-SHA256 (RFC 2104, FIPS 180-4) over its role,
// both nonces and what it tells the other (its rank card), keyed with the
// job key. A process that does not know the key learns nothing from a
// replay (the nonces are fresh) and is dropped without ending the job. This
// is what NCCL's bootstrap does with the random magic of its unique id,
// with a key that never crosses the wire. It authenticates the join, not
// every later byte: an attacker who can inject into an established TCP
// stream is outside what it defends against.
#ifndef LOOMRT_COMM_AUTH_H
#define LOOMRT_COMM_AUTH_H

#include "loomrt/loomrt.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loomrt::auth {

using Digest = std::array<uint8_t, 32>;

/// SHA-256 of `n` bytes (FIPS 180-4).
Digest sha256(const void *data, size_t n);
/// HMAC-SHA256 of the concatenated `parts` under `key` (RFC 2104).
Digest hmac(const std::vector<uint8_t> &key,
            std::initializer_list<std::pair<const void *, size_t>> parts);

/// The job key: LOOMRT_JOB_KEY's bytes (at least 16), or the contents of the
/// file LOOMRT_JOB_KEY_FILE names (a regular file of this user that group
/// and others cannot read or write, 16 to 4096 bytes, trailing newline
/// dropped). `required`: without either, LOOMRT_ERR_INVALID_ARGUMENT with a
/// message that says how to make one; otherwise an empty key and OK.
loomrt_status loadJobKey(bool required, const char *who, std::vector<uint8_t> &key);

/// Both ends of a fresh connection prove they hold `key` and exchange
/// `mine` (sent) and `theirs` (received, `theirsLen` bytes). `initiator`:
/// this end connected (the two roles sign different labels, so a proof
/// cannot be reflected back). False, with `why` filled in, when the peer
/// does not prove it, sends garbage, closes, or the deadline passes first.
bool handshake(int fd, const std::vector<uint8_t> &key, bool initiator, const void *mine,
               size_t mineLen, void *theirs, size_t theirsLen,
               std::chrono::steady_clock::time_point deadline, std::string &why);

} // namespace loomrt::auth

#endif
