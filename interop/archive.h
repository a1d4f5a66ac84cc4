#pragma once
// The containers reference checkpoints come in, read whole into memory (they hold a model's
// weights, which the model will hold anyway):
//   - zip: a .mdlus as PhysicsNeMo 2.x writes it (model.pt, args.json, metadata.json stored at the
//     root) and the file torch.save writes (entries under one folder: archive/data.pkl,
//     archive/data/0, ...; Zip64 records as LibTorch's writer makes them);
//   - tar: a .mdlus of Modulus and PhysicsNeMo before 2.0 (the same three files), which Earth2Studio's
//     published packages still use.
// Only stored (uncompressed) zip entries are read: both writers store. Every offset and length is
// checked against the file before it is used, and a damaged file is an Error naming it and the entry.
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wxtrain::interop {

struct Archive {
  std::string format;                        // "zip" or "tar"
  std::map<std::string, std::string> files;  // entry name -> its bytes ("./" prefixes dropped)
};

// Whether `bytes` start like a zip (local header) or a tar (ustar magic, or a plausible header).
bool is_zip(const std::string& bytes);
bool is_tar(const std::string& bytes);

// The whole file at `path`; Error naming it when it cannot be read.
std::string read_file_bytes(const std::string& path);

// Every regular file of the zip or tar in `bytes`; `source` names it in errors ("fcn.mdlus",
// "fcn.mdlus: model.pt"). A tar is tried first, as PhysicsNeMo does: an old .mdlus is a tar whose
// first member is itself a zip.
Archive read_archive(const std::string& bytes, const std::string& source);

// A zip of stored entries in the given order, as Python's zipfile writes with ZIP_STORED (CRC-32
// and sizes in the local headers; no Zip64: an entry or archive past 4 GiB is an Error).
std::string write_stored_zip(const std::vector<std::pair<std::string, std::string>>& entries);

// CRC-32 (ISO-HDLC, as zip uses).
uint32_t crc32(const std::string& bytes);

}  // namespace wxtrain::interop
