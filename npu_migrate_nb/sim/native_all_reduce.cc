// The simulator's all-reduce (and broadcast, at the end) as TensorFlow kernels: what comm.all_reduce
// does in a graph, without the numpy_function round trip (the GIL, a Python call, numpy
// conversions) at every training step.
//
// Same contract as comm.allreduce_arrays: the call's tensors (one dtype) are fused into one buffer
// (comm._layout: each at a 64-byte boundary; a single tensor is sent from where it lies), a
// descriptor (kind, op, root, bytes, shape signature, sequence) is all-gathered first and every
// rank fails with the same message when ranks disagree, one MPI_Allreduce carries the data, and
// float32 results are multiplied by `scale` and divided by `divisor` afterwards (a float attr is 32-bit:
// float64 tensors stay on the numpy path, whose scale is exact in their precision). The numpy path's
// two cheaper ways are here too: a mean over a power-of-two rank count is scaled while it is fused
// (comm._exact_factor), and another scaled reduction of 1 MB and more is a reduce-scatter, the
// scale on this rank's share, and an all-gather (comm._scattered_allreduce). A large sum goes
// through the MPI-3 shared window of comm._shared_allreduce instead, step for step as there.
//
// MPI is not linked: comm.py hands over MPI_Allreduce/MPI_Iallgather/MPI_Test and the communicator, datatype
// and op handles of the process's mpi4py (MPICH ABI: int handles). The MPI lock, the sequence
// counter and "which collective am I in" live here and are shared with the Python paths through
// the extern "C" functions below, so the two paths stay one ordered stream of collectives.

#include <sys/mman.h>
#include <sys/statvfs.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

namespace {

typedef int (*AllreduceFn)(const void*, void*, int, int, int, int);
typedef int (*IallgatherFn)(const void*, int, int, void*, int, int, int, int*);
typedef int (*TestFn)(int*, int*, void*);
typedef int (*BcastFn)(void*, int, int, int, int);
typedef int (*ReduceScatterFn)(const void*, void*, const int*, int, int, int);
typedef int (*AllgathervFn)(const void*, int, int, void*, const int*, const int*, int, int);
typedef int (*WinAllocateSharedFn)(int64_t, int, int, int, void*, int*);  // MPI_Aint size, MPI_Info, MPI_Comm
typedef int (*WinSharedQueryFn)(int, int, int64_t*, int*, void*);
typedef int (*IbarrierFn)(int, int*);

struct Mpi {
  AllreduceFn allreduce = nullptr;
  IallgatherFn iallgather = nullptr;
  TestFn test = nullptr;
  BcastFn bcast = nullptr;
  ReduceScatterFn reduce_scatter = nullptr;
  AllgathervFn allgatherv = nullptr;
  int byte_type = 0;
  int comm = 0, int64_type = 0, float_type = 0, int32_type = 0;
  int sum = 0, max = 0, min = 0, prod = 0;
  int size = 1, rank = 0;
  void* in_place = nullptr;  // MPI_IN_PLACE
  int64_t spin_ns = 200000;  // comm.spin_seconds
};

Mpi g_mpi;

// comm._shared_slots: one MPI-3 shared window, a slot per rank, for large sums (both paths use it)
struct Shared {
  WinAllocateSharedFn allocate = nullptr;
  WinSharedQueryFn query = nullptr;
  IbarrierFn ibarrier = nullptr;
  int info_null = 0;
  int64_t min_bytes = -1;  // comm._shared_settings: the smallest sum through it, -1 never
  int64_t slot_bytes = 0;
  int window = 0;
  bool sized = false;           // the slots were sized to /dev/shm (SharedSlots' first call)
  std::vector<uint8_t*> slots;  // every rank's slot, once allocated; empty if /dev/shm had no room
};
Shared g_shared;
std::atomic<int64_t> g_shared_sums{0};
std::mutex g_lock;                        // MPI calls never overlap (comm._mpi_lock's twin)
std::atomic<int64_t> g_sequence{0};       // one counter for every collective of the process
std::atomic<int64_t> g_current{-1};       // sequence of the native collective in progress, or -1
std::atomic<int> g_current_kind{0};       // and its kind (comm._KIND_CODES)
std::atomic<int64_t> g_current_since_ns{0};
std::atomic<int> g_aborted{0};
std::atomic<int64_t> g_completed{0};

const int kAllReduce = 1;                 // comm._KIND_CODES["all_reduce"]
const int kBroadcast = 2;                 // comm._KIND_CODES["broadcast"]

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// comm._wait_politely: MPICH waits by polling, so a rank blocked in MPI keeps a core busy; ranks
// wait for each other in the descriptor exchange (the first step of every collective), and with
// more ranks than cores their spinning would take the cores the computing ranks need. Test for
// comm.spin_seconds, then nap between tests, a tenth of the time waited so far, 50 to 500 us.
// An abort (npu_sim_abort) ends the wait; the request then stays pending: restart the ranks.
Status WaitPolitely(int* request, const char* kind, int64_t sequence) {
  const int64_t started = MonotonicNs();
  void* const status_ignore = reinterpret_cast<void*>(1);  // MPICH's MPI_STATUS_IGNORE
  for (;;) {
    int done = 0;
    if (g_mpi.test(request, &done, status_ignore) != 0) return errors::Internal("MPI_Test failed");
    if (done) return OkStatus();
    if (g_aborted.load()) {
      return errors::Aborted("aborted by the runner (while waiting in ", kind, " #", sequence, ")");
    }
    const int64_t waited_ns = MonotonicNs() - started;
    if (waited_ns > g_mpi.spin_ns) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::clamp<int64_t>(waited_ns / 10, 50000, 500000)));
    } else {
      std::this_thread::yield();  // as MPICH's own polling does: a runnable rank on this core goes first
    }
  }
}

// numpy asks for transparent huge pages on large arrays (madvise; the kernel's default here), and an
// MPI reduction into 4 KB pages ran ~7% slower than into numpy's: the recycled buffers ask too.
void AskForHugePages(const void* data, int64_t bytes) {
  const int64_t huge = 2 << 20;
  if (bytes < 2 * huge) return;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(data) + huge - 1) / huge * huge;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / huge * huge;
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);  // a hint: errors ignored
}

uint32_t Crc32(const std::string& text) {  // zlib.crc32, a byte at a time (a list's signature is KBs)
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> entries(256);
    for (uint32_t byte = 0; byte < 256; ++byte) {
      uint32_t crc = byte;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
      entries[byte] = crc;
    }
    return entries;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : text) crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFFu];
  return ~crc;
}

// comm._signature: ";".join(f"{a.dtype.str}{a.shape}" for a in arrays), e.g. "<f4(32, 64);<f4(64,)"
std::string ShapeText(const TensorShape& shape) {
  std::string text = "(";
  for (int d = 0; d < shape.dims(); ++d) text += (d ? ", " : "") + std::to_string(shape.dim_size(d));
  return text + (shape.dims() == 1 ? ",)" : ")");
}

const char* OpName(int code) {
  switch (code) {
    case 1: return "sum";
    case 2: return "max";
    case 3: return "min";
    case 4: return "prod";
    default: return "None";
  }
}

// comm._describe, for the mismatch message
std::string Describe(const int64_t* row) {
  static const char* kinds[] = {"?", "all_reduce", "broadcast", "barrier"};
  std::ostringstream out;
  int64_t kind = row[0];
  out << ((kind >= 1 && kind <= 3) ? kinds[kind] : "?") << " #" << row[5];
  if (kind == 1) out << " (" << OpName(static_cast<int>(row[1])) << ")";
  if (kind == 2) out << " (root " << row[2] << ")";
  char signature[16];
  snprintf(signature, sizeof(signature), "%08x", static_cast<uint32_t>(row[4]));
  out << ", " << row[3] << " bytes, shapes " << signature;
  return out.str();
}

// One collective of the process's ordered stream: holds the MPI lock, takes the next sequence
// number and is "the collective in progress" (npu_sim_current) while it lives.
class InCollective {
 public:
  explicit InCollective(int kind) : guard_(g_lock), sequence_(g_sequence.fetch_add(1)) {
    g_current_since_ns.store(MonotonicNs());
    g_current_kind.store(kind);
    g_current.store(sequence_);
  }
  ~InCollective() {
    g_current.store(-1);
    g_completed.fetch_add(1);
  }
  int64_t sequence() const { return sequence_; }

 private:
  std::lock_guard<std::mutex> guard_;
  int64_t sequence_;
};

// Buffers of one kernel, kept and reused once no output of an earlier step refers to them. Fresh
// pages cost as much as the collective itself (a 64 MB tensor is above malloc's mmap threshold, so
// TensorFlow's CPU allocator maps and faults it in at every step). Two per pool: the buffer this
// step's consumers still hold, and the next.
class RecycledBuffers {
 public:
  Tensor Free(DataType dtype, int64_t count) {
    mutex_lock guard(lock_);
    for (const Tensor& buffer : buffers_) {
      if (buffer.dtype() == dtype && buffer.NumElements() == count && buffer.RefCountIsOne()) return buffer;
    }
    Tensor buffer(dtype, TensorShape({count}));
    AskForHugePages(buffer.tensor_data().data(), buffer.TotalBytes());
    if (buffers_.size() >= 2) buffers_.erase(buffers_.begin());
    buffers_.push_back(buffer);
    return buffer;
  }

 private:
  mutex lock_;
  std::vector<Tensor> buffers_;
};

// comm._free_shared_memory: the bytes /dev/shm can still give, -1 if unknown (no /dev/shm)
int64_t FreeSharedMemory() {
  struct statvfs info;
  if (statvfs("/dev/shm", &info) != 0) return -1;
  return static_cast<int64_t>(info.f_bavail) * static_cast<int64_t>(info.f_frsize);
}

// comm._agree: all-gather the descriptor; every rank fails with the same message if ranks differ.
// Two more fields ride along, not compared: what this rank offers for the call's results
// (RegionOffer; every rank gets the AND of all offers in `consensus`) and the bytes /dev/shm has
// free here (`free_shared`: this rank's figure in, -1 when it did not measure; the ranks' minimum of
// the measured ones out).
const int kDescriptor = 8;  // comm._DESCRIPTOR

Status Agree(int64_t kind, int64_t op, int64_t root, int64_t bytes, int64_t signature, int64_t sequence,
             int64_t offer = 0, int64_t* consensus = nullptr, int64_t* free_shared = nullptr) {
  int64_t mine[kDescriptor] = {kind, op, root, bytes, signature, sequence, offer,
                               free_shared != nullptr ? *free_shared : -1};
  std::vector<int64_t> everyone(kDescriptor * g_mpi.size);
  int request = 0;
  if (g_mpi.iallgather(mine, kDescriptor, g_mpi.int64_type, everyone.data(), kDescriptor, g_mpi.int64_type,
                       g_mpi.comm, &request) != 0) {
    return errors::Internal("MPI_Iallgather failed");
  }
  TF_RETURN_IF_ERROR(WaitPolitely(&request, kind == kBroadcast ? "broadcast" : "all_reduce", sequence));
  bool agree = true;
  for (int r = 0; r < g_mpi.size && agree; ++r) {
    for (int k = 0; k < 5; ++k) agree = agree && everyone[kDescriptor * r + k] == mine[k];
  }
  if (!agree) {
    std::ostringstream lines;
    for (int r = 0; r < g_mpi.size; ++r) {
      lines << (r ? "; " : "") << "rank " << r << ": " << Describe(&everyone[kDescriptor * r]);
    }
    return errors::InvalidArgument("ranks reached different collectives: ", lines.str());
  }
  if (consensus != nullptr) {
    *consensus = offer;
    for (int r = 0; r < g_mpi.size; ++r) *consensus &= everyone[kDescriptor * r + 6];
  }
  if (free_shared != nullptr) {
    *free_shared = mine[7];
    for (int r = 0; r < g_mpi.size; ++r) {
      const int64_t theirs = everyone[kDescriptor * r + 7];
      if (theirs >= 0 && (*free_shared < 0 || theirs < *free_shared)) *free_shared = theirs;
    }
  }
  return OkStatus();
}

// comm._shared_slots: allocated at the first use, inside a collective after the descriptor exchange
// (every rank allocates at the same point); the caller holds the MPI lock.

// comm._slot_that_fits: the configured slot, or less so that the window takes at most half of what
// /dev/shm has free on every rank (`free_bytes`, their minimum); 0 when that is under
// 4 MB (or the configured slot, if smaller): at 8 ranks, 43 MB through 1.4 MB slots (31 chunks, three
// barriers each) took longer than MPI_Allreduce.
int64_t SlotThatFits(int64_t configured, int64_t free_bytes, int size) {
  if (free_bytes < 0) return configured;
  const int64_t fits = free_bytes / 2 / size / 4096 * 4096;
  const int64_t slot = std::min(configured, fits);
  return slot >= std::min<int64_t>(configured, 4 << 20) ? slot : 0;
}

// comm._shared_slots. A window larger than /dev/shm's free space maps fine and then kills the rank
// with SIGBUS at the first page the tmpfs cannot give (Docker's default /dev/shm is 64 MB, of which
// MPICH takes 41 MB for 8 ranks), so the slots are sized to it first, from the ranks' minimum:
// every rank reaches this in the same collective. No room: the slots stay empty, and large sums
// go through MPI_Allreduce from then on (min_bytes -1).
Status SharedSlots() {
  if (g_shared.sized) return OkStatus();
  int64_t free_bytes = FreeSharedMemory(), everywhere = 0;
  if (g_mpi.allreduce(&free_bytes, &everywhere, 1, g_mpi.int64_type, g_mpi.min, g_mpi.comm) != 0) {
    return errors::Internal("MPI_Allreduce failed");
  }
  g_shared.sized = true;
  const int64_t configured = g_shared.slot_bytes;
  g_shared.slot_bytes = SlotThatFits(configured, everywhere, g_mpi.size);
  if (g_shared.slot_bytes == 0) {
    g_shared.min_bytes = -1;
    if (g_mpi.rank == 0) {
      std::fprintf(stderr, "npu-migrate-nb: /dev/shm has %lld MB free for %d ranks: large sums go through "
                   "MPI_Allreduce instead of shared memory (slower; give the container more, e.g. docker run "
                   "--shm-size=1g)\n", static_cast<long long>(everywhere >> 20), g_mpi.size);
    }
    return OkStatus();
  }
  void* mine = nullptr;
  if (g_shared.allocate(g_shared.slot_bytes, 1, g_shared.info_null, g_mpi.comm, &mine, &g_shared.window) != 0) {
    return errors::Internal("MPI_Win_allocate_shared failed");
  }
  for (int r = 0; r < g_mpi.size; ++r) {
    int64_t bytes = 0;
    int unit = 0;
    void* base = nullptr;
    if (g_shared.query(g_shared.window, r, &bytes, &unit, &base) != 0 || bytes < g_shared.slot_bytes) {
      g_shared.slots.clear();
      return errors::Internal("MPI_Win_shared_query failed");
    }
    g_shared.slots.push_back(static_cast<uint8_t*>(base));
  }
  return OkStatus();
}

// comm._shared_barrier; the fences make what this rank wrote to its slot visible to the others
Status SharedBarrier(int64_t sequence) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  int request = 0;
  if (g_shared.ibarrier(g_mpi.comm, &request) != 0) return errors::Internal("MPI_Ibarrier failed");
  TF_RETURN_IF_ERROR(WaitPolitely(&request, "all_reduce", sequence));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return OkStatus();
}

// A tensor buffer over memory TensorBuffer does not own (a shared window, an arena), with a
// reference count of its own as TensorFlow's buffers have: RefCountIsOne means no tensor uses it.
class ExternalBuffer : public TensorBuffer {
 public:
  ExternalBuffer(void* data, int64_t bytes, const char* allocator)
      : TensorBuffer(data), bytes_(bytes), allocator_(allocator) {}
  size_t size() const override { return bytes_; }
  TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(AllocationDescription* proto) const override {
    proto->set_requested_bytes(bytes_);
    proto->set_allocator_name(allocator_);
  }

 private:
  const int64_t bytes_;
  const char* const allocator_;
};

// The results of large sums, shared by every rank: each rank writes its share of the sum into one
// region that all ranks' outputs are slices of, instead of every rank copying every share out of
// the slots into a buffer of its own (at 8 ranks, 40% of the sum's memory traffic, and a result
// buffer per rank). A region is written again only once no rank holds an output of it: each rank
// offers the regions it holds nothing of in the descriptor exchange, and all take the first region
// every rank offered (or make the next one, all at once, or copy out as before). A region's
// buffer keeps one reference of ours, so an output is never taken over by an op that writes in
// place (TensorFlow forwards a buffer only when its root has one reference), and a region is free
// here when that reference is the only one left.
class SharedRegion : public ExternalBuffer {
 public:
  SharedRegion(void* data, int64_t bytes) : ExternalBuffer(data, bytes, "npu_sim_shared_results") {}
};

const int kRegions = 2;  // a step's results and the next step's, or two models' (a GAN's)
std::vector<SharedRegion*> g_regions;  // made in step on every rank; never freed (MPI owns the memory)
std::atomic<int64_t> g_region_sums{0};

// bit k: region k is free here and holds `bytes`; bit kRegions + k: region k is not made yet. Only
// once the slots are sized (their first sum, which this one is not: it measured /dev/shm first).
int64_t RegionOffer(int64_t bytes) {
  if (!g_shared.sized || g_shared.slots.empty()) return 0;
  int64_t offer = 0;
  for (int k = 0; k < kRegions; ++k) {
    if (k >= static_cast<int>(g_regions.size())) {
      offer |= int64_t{1} << (kRegions + k);
    } else if (static_cast<int64_t>(g_regions[k]->size()) >= bytes && g_regions[k]->RefCountIsOne()) {
      offer |= int64_t{1} << k;
    }
  }
  return offer;
}

// The region every rank agreed on (`consensus`, the AND of the offers), made now if it is new and
// /dev/shm has room for it (at most half of what it has free on every rank, as for the slots), or
// nullptr: copy out. Every rank decides the same from the same figures.
Status RegionFor(int64_t consensus, int64_t free_shared, int64_t bytes, SharedRegion** region) {
  *region = nullptr;
  for (int k = 0; k < kRegions; ++k) {
    if (consensus & (int64_t{1} << k)) {
      *region = g_regions[k];
      return OkStatus();
    }
  }
  const int k = static_cast<int>(g_regions.size());
  const int64_t rounded = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  if (k >= kRegions || !(consensus & (int64_t{1} << (kRegions + k))) ||
      (free_shared >= 0 && rounded > free_shared / 2)) {
    return OkStatus();
  }
  void* mine = nullptr;
  int window = 0;
  if (g_shared.allocate(g_mpi.rank == 0 ? rounded : 0, 1, g_shared.info_null, g_mpi.comm, &mine, &window) != 0) {
    return errors::Internal("MPI_Win_allocate_shared failed (results)");
  }
  int64_t size = 0;
  int unit = 0;
  void* base = nullptr;
  if (g_shared.query(window, 0, &size, &unit, &base) != 0 || size < rounded) {
    return errors::Internal("MPI_Win_shared_query failed (results)");
  }
  g_regions.push_back(new SharedRegion(base, rounded));
  *region = g_regions.back();
  return OkStatus();
}

// numpy's dtype.str of each dtype the broadcast kernel takes (comm._signature)
const char* NumpyDtypeStr(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT: return "<f4";
    case DT_DOUBLE: return "<f8";
    case DT_HALF: return "<f2";
    case DT_INT8: return "|i1";
    case DT_UINT8: return "|u1";
    case DT_INT16: return "<i2";
    case DT_INT32: return "<i4";
    case DT_INT64: return "<i8";
    case DT_BOOL: return "|b1";
    default: return "?";
  }
}

// comm._layout in bytes and comm._signature, for the broadcast kernels: where each tensor lies in
// the fused byte buffer (64-byte boundaries), the bytes they hold, and the shape signature.
struct ByteLayout {
  std::vector<int64_t> offsets;
  int64_t end = 0, bytes = 0;
  std::string signature;
};

ByteLayout LayOutBytes(const std::vector<const Tensor*>& values) {
  ByteLayout layout;
  for (size_t i = 0; i < values.size(); ++i) {
    const Tensor& value = *values[i];
    layout.offsets.push_back((layout.end + 63) / 64 * 64);
    layout.end = layout.offsets.back() + value.TotalBytes();
    layout.bytes += value.TotalBytes();
    layout.signature += (i ? ";" : "") + std::string(NumpyDtypeStr(value.dtype())) + ShapeText(value.shape());
  }
  return layout;
}

// the root's tensors copied to their offsets, the padding between them zeroed (comm._fuse_into)
void FuseBytes(const std::vector<const Tensor*>& values, const ByteLayout& layout, uint8_t* buffer) {
  int64_t filled = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    std::memset(buffer + filled, 0, layout.offsets[i] - filled);
    std::memcpy(buffer + layout.offsets[i], values[i]->tensor_data().data(), values[i]->TotalBytes());
    filled = layout.offsets[i] + values[i]->TotalBytes();
  }
}

// one broadcast of the process's ordered stream: the call's descriptor agreed, then the bytes
Status BroadcastBytes(int root, const ByteLayout& layout, uint8_t* buffer) {
  InCollective collective(kBroadcast);
  TF_RETURN_IF_ERROR(Agree(kBroadcast, 0, root, layout.bytes, Crc32(layout.signature), collective.sequence()));
  if (g_mpi.bcast(buffer, static_cast<int>(layout.end), g_mpi.byte_type, root, g_mpi.comm) != 0) {
    return errors::Internal("MPI_Bcast failed");
  }
  return OkStatus();
}

template <typename T> const char* DtypeStr();
template <> const char* DtypeStr<float>() { return "<f4"; }
template <> const char* DtypeStr<int32>() { return "<i4"; }
template <> const char* DtypeStr<int64_t>() { return "<i8"; }

template <typename T> int MpiType();
template <> int MpiType<float>() { return g_mpi.float_type; }
template <> int MpiType<int32>() { return g_mpi.int32_type; }
template <> int MpiType<int64_t>() { return g_mpi.int64_type; }

}  // namespace

extern "C" {

void npu_sim_configure(void* allreduce, void* iallgather, void* test, void* bcast, void* reduce_scatter, void* allgatherv,
                       void* in_place, int64_t spin_ns, int size, int rank, int comm,
                       int int64_type, int float_type, int int32_type, int byte_type, int sum, int max, int min, int prod) {
  g_mpi.reduce_scatter = reinterpret_cast<ReduceScatterFn>(reduce_scatter);
  g_mpi.allgatherv = reinterpret_cast<AllgathervFn>(allgatherv);
  g_mpi.bcast = reinterpret_cast<BcastFn>(bcast);
  g_mpi.byte_type = byte_type;
  g_mpi.allreduce = reinterpret_cast<AllreduceFn>(allreduce);
  g_mpi.iallgather = reinterpret_cast<IallgatherFn>(iallgather);
  g_mpi.test = reinterpret_cast<TestFn>(test);
  g_mpi.in_place = in_place;
  g_mpi.spin_ns = spin_ns;
  g_mpi.comm = comm;
  g_mpi.size = size;
  g_mpi.rank = rank;
  g_mpi.int64_type = int64_type;
  g_mpi.float_type = float_type;
  g_mpi.int32_type = int32_type;
  g_mpi.sum = sum;
  g_mpi.max = max;
  g_mpi.min = min;
  g_mpi.prod = prod;
}

void npu_sim_configure_shared(void* allocate, void* query, void* ibarrier, int info_null, int64_t min_bytes,
                              int64_t slot_bytes) {
  g_shared.allocate = reinterpret_cast<WinAllocateSharedFn>(allocate);
  g_shared.query = reinterpret_cast<WinSharedQueryFn>(query);
  g_shared.ibarrier = reinterpret_cast<IbarrierFn>(ibarrier);
  g_shared.info_null = info_null;
  g_shared.min_bytes = min_bytes;
  g_shared.slot_bytes = slot_bytes;
}

// comm._shared_slots on the numpy path: every rank's slot into `bases`; the slot's bytes, or -1.
// Called with the MPI lock held, inside a collective.
int64_t npu_sim_shared_slots(void** bases) {
  if (!SharedSlots().ok()) return -1;
  if (g_shared.slots.empty()) return 0;  // /dev/shm had no room
  for (int r = 0; r < g_mpi.size; ++r) bases[r] = g_shared.slots[r];
  return g_shared.slot_bytes;
}

int64_t npu_sim_shared_sums() { return g_shared_sums.load(); }
// of them, the sums whose results went to a shared region (no copy-out); the regions made
int64_t npu_sim_region_sums() { return g_region_sums.load(); }
int64_t npu_sim_regions() { return static_cast<int64_t>(g_regions.size()); }
// the slot bytes the window was given (sized to /dev/shm), 0 if it had no room, -1 before the first use
int64_t npu_sim_shared_slot_bytes() { return !g_shared.sized ? -1 : g_shared.slots.empty() ? 0 : g_shared.slot_bytes; }

void npu_sim_lock() { g_lock.lock(); }
void npu_sim_unlock() { g_lock.unlock(); }
int64_t npu_sim_next_sequence() { return g_sequence.fetch_add(1); }
int64_t npu_sim_current() { return g_current.load(); }
int npu_sim_current_kind() { return g_current_kind.load(); }
int64_t npu_sim_completed() { return g_completed.load(); }
double npu_sim_current_seconds() {
  return g_current.load() < 0 ? -1.0 : (MonotonicNs() - g_current_since_ns.load()) / 1e9;
}
void npu_sim_abort() { g_aborted.store(1); }

}  // extern "C"

REGISTER_OP("NpuSimAllReduce")
    .Input("values: N * T")
    .Output("reduced: N * T")
    .Attr("N: int >= 1")
    .Attr("T: {float, int32, int64}")
    .Attr("reduction: {'sum', 'max', 'min', 'prod'}")
    .Attr("scale: float = 1.0")
    .Attr("divisor: float = 1.0")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return OkStatus();
    });

template <typename T>
class NpuSimAllReduceOp : public OpKernel {
 public:
  explicit NpuSimAllReduceOp(OpKernelConstruction* context) : OpKernel(context) {
    std::string reduction;
    OP_REQUIRES_OK(context, context->GetAttr("reduction", &reduction));
    OP_REQUIRES_OK(context, context->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(context, context->GetAttr("divisor", &divisor_));
    op_code_ = reduction == "sum" ? 1 : reduction == "max" ? 2 : reduction == "min" ? 3 : 4;
  }

  void Compute(OpKernelContext* context) override {
    OpInputList values;
    OP_REQUIRES_OK(context, context->input_list("values", &values));
    OpOutputList reduced;
    OP_REQUIRES_OK(context, context->output_list("reduced", &reduced));
    OP_REQUIRES(context, g_mpi.allreduce != nullptr,
                errors::FailedPrecondition("the simulator's native collectives are not configured"));
    OP_REQUIRES(context, !g_aborted.load(),
                errors::Aborted("aborted by the runner (while starting an all_reduce)"));

    // comm._layout: every tensor starts on a 64-byte boundary of the fused buffer, so that each
    // output can be a slice of it (TensorFlow's kernels need aligned tensors); the wire count is
    // the same on the numpy path.
    std::vector<int64_t> offsets(values.size());
    int64_t count = 0, bytes = 0;
    std::string signature;
    for (int i = 0; i < values.size(); ++i) {
      offsets[i] = i ? RoundUp(count) : 0;
      count = offsets[i] + values[i].NumElements();
      bytes += values[i].NumElements() * sizeof(T);
      signature += (i ? ";" : "") + std::string(DtypeStr<T>()) + ShapeText(values[i].shape());
    }
    OP_REQUIRES(context, count <= INT32_MAX, errors::InvalidArgument("all_reduce of over 2**31 elements"));

    const T factor = ExactFactor();
    const bool shared = ThroughSharedMemory(count);
    const bool scattered = !shared && factor == T(0) && Scattered(count);
    Tensor fused;  // the results, each output a slice of it
    if (shared) {
      OP_REQUIRES_OK(context, SharedExchange(values, offsets, count, bytes, Crc32(signature), factor, &fused));
    } else {
      fused = results_.Free(DataTypeToEnum<T>::value, count);
      OP_REQUIRES_OK(context, PrivateExchange(values, offsets, fused.flat<T>().data(), count, bytes,
                                              Crc32(signature), factor, scattered));
    }
    for (int i = 0; i < values.size(); ++i) {
      Tensor out;
      Tensor piece = fused.Slice(offsets[i], offsets[i] + values[i].NumElements());
      OP_REQUIRES(context, out.CopyFrom(piece, values[i].shape()) && out.IsAligned(),
                  errors::Internal("misaligned all_reduce output"));
      reduced.set(i, out);
    }
  }

 private:
  // the paths whose results land in this rank's own recycled buffer, `receive`
  Status PrivateExchange(const OpInputList& values, const std::vector<int64_t>& offsets, T* receive, int64_t count,
                         int64_t bytes, int64_t signature, T factor, bool scattered) {
    Tensor staging = values.size() > 1 && scattered ? staging_.Free(DataTypeToEnum<T>::value, count) : Tensor();
    if (factor != T(0)) {  // comm._allreduce_group: scaled while fused, then reduced in place
      Fuse(values, offsets, receive, factor);
      return Exchange(reinterpret_cast<const T*>(g_mpi.in_place), receive, count, bytes, signature);
    }
    if (scattered) {
      const T* send = values.size() > 1 ? staging.flat<T>().data() : values[0].flat<T>().data();
      if (values.size() > 1) Fuse(values, offsets, staging.flat<T>().data(), T(1));
      return ScatteredExchange(send, receive, count, bytes, signature);
    }
    // a single tensor is sent from where it lies; several are fused and reduced in place
    const T* send = values[0].flat<T>().data();
    if (values.size() > 1) {
      Fuse(values, offsets, receive, T(1));
      send = reinterpret_cast<const T*>(g_mpi.in_place);
    }
    TF_RETURN_IF_ERROR(Exchange(send, receive, count, bytes, signature));
    if (std::is_floating_point<T>::value) Rescale(receive, count);
    return OkStatus();
  }

  static int64_t RoundUp(int64_t elements) {
    const int64_t per_line = 64 / sizeof(T);
    return (elements + per_line - 1) / per_line * per_line;
  }

  // comm._fuse_into: each tensor at its offset (times `factor`), the padding between them zeroed
  static void Fuse(const OpInputList& values, const std::vector<int64_t>& offsets, T* fused, T factor) {
    const int last = values.size() - 1;
    FuseRange(values, offsets, 0, offsets[last] + values[last].NumElements(), fused, factor);
  }

  // comm._fuse_range: elements [start, start + count) of the fused buffer (Fuse) into `slot`; the
  // padding, reduced with the rest, zeroed to keep it harmless
  static void FuseRange(const OpInputList& values, const std::vector<int64_t>& offsets, int64_t start,
                        int64_t count, T* slot, T factor) {
    const int64_t end = start + count;
    int64_t cursor = start;
    for (int i = 0; i < values.size(); ++i) {
      const int64_t low = std::max(offsets[i], start), high = std::min(offsets[i] + values[i].NumElements(), end);
      if (high <= low) {
        if (offsets[i] >= end) break;
        continue;
      }
      std::fill(slot + (cursor - start), slot + (low - start), T(0));
      const T* piece = values[i].flat<T>().data() + (low - offsets[i]);
      T* out = slot + (low - start);
      if (factor == T(1)) {
        std::memcpy(out, piece, (high - low) * sizeof(T));
      } else {
        for (int64_t j = 0; j < high - low; ++j) out[j] = piece[j] * factor;
      }
      cursor = high;
    }
    std::fill(slot + (cursor - start), slot + count, T(0));
  }

  bool ThroughSharedMemory(int64_t count) const {
    return op_code_ == 1 && g_mpi.size > 1 && g_shared.allocate != nullptr && g_shared.min_bytes >= 0 &&
           count * static_cast<int64_t>(sizeof(T)) >= g_shared.min_bytes;
  }

  // comm._shared_allreduce, step for step: the same chunks, shares, order of additions and scaling.
  // The results go to a shared region when every rank holds nothing of it (SharedRegion: no
  // copy-out), else to this rank's recycled buffer, copied out of the slots as there.
  Status SharedExchange(const OpInputList& values, const std::vector<int64_t>& offsets, int64_t count,
                        int64_t bytes, int64_t signature, T factor, Tensor* fused) {
    InCollective collective(kAllReduce);
    const int64_t result_bytes = count * static_cast<int64_t>(sizeof(T));
    const int64_t offer = RegionOffer(result_bytes);
    // /dev/shm measured only while a region may still be made (every rank the same: they are made in
    // step), not at every step
    int64_t consensus = 0, free_shared = (offer >> kRegions) != 0 ? FreeSharedMemory() : -1;
    TF_RETURN_IF_ERROR(Agree(kAllReduce, op_code_, 0, bytes, signature, collective.sequence(), offer,
                             &consensus, &free_shared));
    TF_RETURN_IF_ERROR(SharedSlots());
    SharedRegion* region = nullptr;
    if (!g_shared.slots.empty()) TF_RETURN_IF_ERROR(RegionFor(consensus, free_shared, result_bytes, &region));
    *fused = region != nullptr ? Tensor(DataTypeToEnum<T>::value, TensorShape({count}), region)
                               : results_.Free(DataTypeToEnum<T>::value, count);
    T* receive = fused->flat<T>().data();
    if (g_shared.slots.empty()) {  // /dev/shm had no room, on some rank: all of them sum through MPI
      Fuse(values, offsets, receive, factor == T(0) ? T(1) : factor);
      if (g_mpi.allreduce(g_mpi.in_place, receive, static_cast<int>(count), MpiType<T>(), g_mpi.sum, g_mpi.comm) != 0) {
        return errors::Internal("MPI_Allreduce failed");
      }
      if (factor == T(0) && std::is_floating_point<T>::value) Rescale(receive, count);
      return OkStatus();
    }
    const int64_t per_line = 64 / sizeof(T);
    const int64_t chunk = g_shared.slot_bytes / static_cast<int64_t>(sizeof(T)) / per_line * per_line;
    std::vector<T*> slots;
    for (uint8_t* base : g_shared.slots) slots.push_back(reinterpret_cast<T*>(base));
    const int me = g_mpi.rank;
    std::vector<int> counts, displacements;
    for (int64_t start = 0; start < count; start += chunk) {
      const int64_t n = std::min(chunk, count - start);
      // no slot is refilled before every rank copied it out (a region's sums read the slots only
      // before the barrier after them)
      if (start > 0 && region == nullptr) TF_RETURN_IF_ERROR(SharedBarrier(collective.sequence()));
      FuseRange(values, offsets, start, n, slots[me], factor == T(0) ? T(1) : factor);
      TF_RETURN_IF_ERROR(SharedBarrier(collective.sequence()));
      Shares(n, &counts, &displacements);
      T* share = (region != nullptr ? receive + start : slots[me]) + displacements[me];
      SumShare(slots, displacements[me], counts[me], share);
      if (factor == T(0) && std::is_floating_point<T>::value) Rescale(share, counts[me]);
      TF_RETURN_IF_ERROR(SharedBarrier(collective.sequence()));
      if (region != nullptr) continue;
      for (int r = 0; r < g_mpi.size; ++r) {
        std::memcpy(receive + start + displacements[r], slots[r] + displacements[r], counts[r] * sizeof(T));
      }
    }
    g_shared_sums.fetch_add(1);
    if (region != nullptr) g_region_sums.fetch_add(1);
    return OkStatus();
  }

  // out[0:n] = slot[0][from:from + n] + slot[1][...] + ... (rank order, as numpy's np.add then +=),
  // a block at a time: every input element is read before its place is written (`out` may be this
  // rank's own slot)
  static void SumShare(const std::vector<T*>& slots, int64_t from, int64_t n, T* out) {
    constexpr int64_t kBlock = 2048;
    T total[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      const T* first = slots[0] + from + b;
      const T* second = slots[1] + from + b;
      for (int64_t j = 0; j < m; ++j) total[j] = first[j] + second[j];
      for (size_t r = 2; r < slots.size(); ++r) {
        const T* more = slots[r] + from + b;
        for (int64_t j = 0; j < m; ++j) total[j] += more[j];
      }
      std::memcpy(out + b, total, m * sizeof(T));
    }
  }

  // comm._exact_factor: scale / divisor when it is a power of two and the reduction a sum (a mean
  // over 2, 4, 8 ranks), else 0. Multiplying by 2**k is exact, so scaling each rank's values
  // before the sum gives the bits of scaling the sum (outside the subnormal range), and the scale
  // rides on the copy into the fused buffer that the reduction needs anyway: no pass of its own.
  T ExactFactor() const {
    if (!std::is_floating_point<T>::value || op_code_ != 1 || (scale_ == 1.0f && divisor_ == 1.0f)) return T(0);
    const double factor = static_cast<double>(scale_) / static_cast<double>(divisor_);
    int exponent = 0;
    return std::frexp(factor, &exponent) == 0.5 ? static_cast<T>(factor) : T(0);
  }

  // comm._scattered: any other scaled reduction of 1 MB and more is a reduce-scatter, the scale on
  // this rank's share only, and an all-gather, instead of an all-reduce and a pass over the whole
  // result: the scale then costs 1/N of a pass, on memory the reduction just wrote (the all-reduce
  // of large messages is a reduce-scatter and an all-gather inside MPI anyway). Each element is
  // still scaled once after the whole sum: the same bits at 2 ranks (a + b is b + a).
  bool Scattered(int64_t count) const {
    return std::is_floating_point<T>::value && (scale_ != 1.0f || divisor_ != 1.0f) && g_mpi.size > 1 &&
           count * static_cast<int64_t>(sizeof(T)) >= kScatteredMinBytes && g_mpi.reduce_scatter != nullptr;
  }

  // comm._shares: rank r's share of `count` elements, boundaries on 64-byte lines
  static void Shares(int64_t count, std::vector<int>* counts, std::vector<int>* displacements) {
    const int size = g_mpi.size;
    counts->resize(size);
    displacements->resize(size);
    int64_t start = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t end = r + 1 == size ? count : std::min(count, RoundUp(count * (r + 1) / size));
      (*displacements)[r] = static_cast<int>(start);
      (*counts)[r] = static_cast<int>(std::max<int64_t>(end - start, 0));
      start = std::max(start, end);
    }
  }

  Status ScatteredExchange(const T* send, T* receive, int64_t count, int64_t bytes, int64_t signature) {
    std::vector<int> counts, displacements;
    Shares(count, &counts, &displacements);
    InCollective collective(kAllReduce);
    TF_RETURN_IF_ERROR(Agree(kAllReduce, op_code_, 0, bytes, signature, collective.sequence()));
    int op = op_code_ == 1 ? g_mpi.sum : op_code_ == 2 ? g_mpi.max : op_code_ == 3 ? g_mpi.min : g_mpi.prod;
    T* mine = receive + displacements[g_mpi.rank];
    if (g_mpi.reduce_scatter(send, mine, counts.data(), MpiType<T>(), op, g_mpi.comm) != 0) {
      return errors::Internal("MPI_Reduce_scatter failed");
    }
    Rescale(mine, counts[g_mpi.rank]);
    if (g_mpi.allgatherv(g_mpi.in_place, 0, MpiType<T>(), receive, counts.data(), displacements.data(),
                         MpiType<T>(), g_mpi.comm) != 0) {
      return errors::Internal("MPI_Allgatherv failed");
    }
    return OkStatus();
  }

  // float32 only (float64 stays on the numpy path); exact IEEE operations, the numpy path's bits.
  void Rescale(T* data, int64_t count) const {
    if (scale_ != 1.0f) {
      const T scale = static_cast<T>(scale_);
      for (int64_t j = 0; j < count; ++j) data[j] *= scale;
    }
    if (divisor_ != 1.0f) {
      const T divisor = static_cast<T>(divisor_);
      for (int64_t j = 0; j < count; ++j) data[j] /= divisor;
    }
  }

  static constexpr int64_t kScatteredMinBytes = 1 << 20;  // comm._SCATTERED_MIN_BYTES
  RecycledBuffers results_;  // fused results, handed out as the outputs
  RecycledBuffers staging_;  // the fused input of a scattered reduction (never handed out)

  Status Exchange(const T* send, T* receive, int64_t count, int64_t bytes, int64_t signature) {
    InCollective collective(kAllReduce);
    TF_RETURN_IF_ERROR(Agree(kAllReduce, op_code_, 0, bytes, signature, collective.sequence()));
    int op = op_code_ == 1 ? g_mpi.sum : op_code_ == 2 ? g_mpi.max : op_code_ == 3 ? g_mpi.min : g_mpi.prod;
    if (g_mpi.allreduce(send, receive, static_cast<int>(count), MpiType<T>(), op, g_mpi.comm) != 0) {
      return errors::Internal("MPI_Allreduce failed");
    }
    return OkStatus();
  }

  float scale_ = 1.0f, divisor_ = 1.0f;
  int op_code_ = 1;
};

#define REGISTER(T) \
  REGISTER_KERNEL_BUILDER(Name("NpuSimAllReduce").Device(DEVICE_CPU).TypeConstraint<T>("T"), NpuSimAllReduceOp<T>)
REGISTER(float);
REGISTER(int32);
REGISTER(int64_t);
#undef REGISTER

// comm.broadcast_arrays in a graph: one MPI_Bcast of the call's tensors as bytes (comm._layout,
// 64-byte boundaries). The root's outputs are its inputs; a single tensor is sent from where it
// lies; other ranks' outputs are slices of a recycled receive buffer.
REGISTER_OP("NpuSimBroadcast")
    .Input("values: T")
    .Output("received: T")
    .Attr("T: list({float, double, half, int8, uint8, int16, int32, int64, bool})")
    .Attr("root: int")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return OkStatus();
    });

class NpuSimBroadcastOp : public OpKernel {
 public:
  explicit NpuSimBroadcastOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("root", &root_));
  }

  void Compute(OpKernelContext* context) override {
    OpInputList values;
    OP_REQUIRES_OK(context, context->input_list("values", &values));
    OP_REQUIRES(context, g_mpi.bcast != nullptr,
                errors::FailedPrecondition("the simulator's native collectives are not configured"));
    OP_REQUIRES(context, !g_aborted.load(),
                errors::Aborted("aborted by the runner (while starting a broadcast)"));
    std::vector<const Tensor*> tensors;
    for (int i = 0; i < values.size(); ++i) tensors.push_back(&values[i]);
    const ByteLayout layout = LayOutBytes(tensors);
    OP_REQUIRES(context, layout.end <= INT32_MAX, errors::InvalidArgument("broadcast of over 2 GB"));
    const bool root = g_mpi.rank == root_;
    const bool in_place = root && values.size() == 1;
    Tensor fused = in_place ? Tensor() : fused_.Free(DT_INT8, layout.end);
    uint8_t* buffer = in_place ? const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(values[0].tensor_data().data()))
                               : reinterpret_cast<uint8_t*>(fused.flat<int8>().data());
    if (root && !in_place) FuseBytes(tensors, layout, buffer);
    OP_REQUIRES_OK(context, BroadcastBytes(root_, layout, buffer));
    for (int i = 0; i < values.size(); ++i) {
      if (root) {
        context->set_output(i, values[i]);
        continue;
      }
      Tensor out;
      OP_REQUIRES_OK(context, out.BitcastFrom(fused.Slice(layout.offsets[i], layout.offsets[i] + values[i].TotalBytes()),
                                              values[i].dtype(), values[i].shape()));
      OP_REQUIRES(context, out.IsAligned(), errors::Internal("misaligned broadcast output"));
      context->set_output(i, out);
    }
  }

 private:
  int root_ = 0;
  RecycledBuffers fused_;
};

REGISTER_KERNEL_BUILDER(Name("NpuSimBroadcast").Device(DEVICE_CPU), NpuSimBroadcastOp);

// The buffer a broadcast list of variables lives in from its first broadcast on, each variable at
// its ByteLayout offset, so that every later broadcast of the list is one message sent from and
// received into the variables themselves: against a message per variable or a fused copy (2-4x a
// raw MPI_Bcast of the same bytes), nothing is copied. On huge pages when large: MPI moves a large
// broadcast in one cross-process copy (CMA) that pins every page it touches, and into TensorFlow's
// buffers (4 KB pages) it ran at half the speed.
struct Arena {
  Tensor bytes;
  uint8_t* base() const { return reinterpret_cast<uint8_t*>(const_cast<char*>(bytes.tensor_data().data())); }
};

// A variable's buffer inside an arena, with its own reference count: an update in place
// (PrepareToUpdateVariable asks RefCountIsOne) and a read still held work as on TensorFlow's own
// buffers. The arena is freed with the last of its variables' buffers.
class ArenaSlice : public ExternalBuffer {
 public:
  ArenaSlice(std::shared_ptr<const Arena> arena, int64_t offset, int64_t bytes)
      : ExternalBuffer(arena->base() + offset, bytes, "npu_sim_broadcast_arena"), arena_(std::move(arena)) {}

 private:
  const std::shared_ptr<const Arena> arena_;
};

// npu.distribute.broadcast of resource variables: each variable receives root's value in place,
// under its lock, as an optimizer's update does (a tensor read from it earlier and still held is
// left as it was: the variable then gets a new buffer). The list is one message, sent from and
// received into the arena its variables are moved to once (see Arena).
REGISTER_OP("NpuSimBroadcastVariables")
    .Input("resources: N * resource")
    .Attr("N: int >= 1")
    .Attr("root: int")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);

class NpuSimBroadcastVariablesOp : public OpKernel {
 public:
  explicit NpuSimBroadcastVariablesOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("root", &root_));
  }

  void Compute(OpKernelContext* context) override {
    OP_REQUIRES(context, g_mpi.bcast != nullptr,
                errors::FailedPrecondition("the simulator's native collectives are not configured"));
    OP_REQUIRES(context, !g_aborted.load(),
                errors::Aborted("aborted by the runner (while starting a broadcast)"));
    std::vector<core::RefCountPtr<Var>> variables;
    OP_REQUIRES_OK(context, Variables(context, &variables));
    std::vector<Var*> order;  // locked in address order (a variable given twice, once)
    for (auto& variable : variables) order.push_back(variable.get());
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    for (Var* variable : order) variable->mu()->lock();
    Status status = Broadcast(context, variables);
    for (Var* variable : order) variable->mu()->unlock();
    OP_REQUIRES_OK(context, status);
  }

 protected:
  // the variables to broadcast: here one input handle each
  virtual Status Variables(OpKernelContext* context, std::vector<core::RefCountPtr<Var>>* variables) {
    variables->resize(context->num_inputs());
    for (int i = 0; i < context->num_inputs(); ++i) {
      TF_RETURN_IF_ERROR(LookupResource(context, HandleFromInput(context, i), &(*variables)[i]));
    }
    return OkStatus();
  }

 private:
  Status Broadcast(OpKernelContext* context, std::vector<core::RefCountPtr<Var>>& variables) {
    std::vector<const Tensor*> tensors;
    for (auto& variable : variables) {
      if (!variable->is_initialized) {
        return errors::FailedPrecondition("broadcast of a variable that is not initialized (",
                                          variable->DebugString(), ")");
      }
      if (std::string(NumpyDtypeStr(variable->tensor()->dtype())) == "?") {
        return errors::InvalidArgument("broadcast of a ", DataTypeString(variable->tensor()->dtype()), " variable");
      }
      tensors.push_back(variable->tensor());
    }
    const ByteLayout layout = LayOutBytes(tensors);
    if (layout.end > INT32_MAX) return errors::InvalidArgument("broadcast of over 2 GB");
    const bool root = g_mpi.rank == root_;
    std::shared_ptr<const Arena> arena = Holding(tensors, layout);
    if (arena == nullptr || !(root || Writable(variables))) {
      TF_RETURN_IF_ERROR(MoveIntoArena(context, variables, tensors, layout, root, &arena));
    }
    return BroadcastBytes(root_, layout, arena->base());
  }

  // As training_op_helpers' PrepareToUpdateVariable: a variable's buffer may be written when it is
  // the buffer's only owner.
  static bool Writable(const std::vector<core::RefCountPtr<Var>>& variables) {
    for (const auto& variable : variables) {
      if (!variable->tensor()->RefCountIsOne() || variable->copy_on_read_mode.load()) return false;
    }
    return true;
  }

  // Every variable (whose value is tensors[i]) gets a new buffer in a new arena, the old value
  // staying with its readers; the root's keep their values, fused in as a broadcast's are.
  static Status MoveIntoArena(OpKernelContext* context, std::vector<core::RefCountPtr<Var>>& variables,
                              const std::vector<const Tensor*>& tensors, const ByteLayout& layout, bool root,
                              std::shared_ptr<const Arena>* moved_to) {
    auto arena = std::make_shared<Arena>();
    AllocatorAttributes attributes;
    attributes.set_gpu_compatible(true);
    attributes.set_nic_compatible(true);
    TF_RETURN_IF_ERROR(context->allocate_temp(DT_INT8, TensorShape({std::max<int64_t>(layout.end, 1)}),
                                              &arena->bytes, attributes));
    AskForHugePages(arena->base(), layout.end);  // before its pages are touched
    if (root) FuseBytes(tensors, layout, arena->base());
    for (size_t i = 0; i < variables.size(); ++i) {
      Tensor* value = variables[i]->tensor();
      auto* slice = new ArenaSlice(arena, layout.offsets[i], value->TotalBytes());
      *value = Tensor(value->dtype(), value->shape(), slice);
      slice->Unref();  // the tensor holds its own reference
    }
    Remember(arena);
    *moved_to = arena;
    return OkStatus();
  }

  // the live arena in which these tensors lie at the layout's offsets, or null (the arena of a list
  // whose variables were reassigned since, or another list's)
  static std::shared_ptr<const Arena> Holding(const std::vector<const Tensor*>& tensors, const ByteLayout& layout) {
    std::shared_ptr<const Arena> arena;
    {
      std::lock_guard<std::mutex> guard(arenas_lock_);
      auto found = arenas_.find(tensors[0]->tensor_data().data());
      if (found != arenas_.end()) arena = found->second.lock();
    }
    if (arena == nullptr || arena->bytes.NumElements() != std::max<int64_t>(layout.end, 1)) return nullptr;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i]->tensor_data().data() != reinterpret_cast<const char*>(arena->base() + layout.offsets[i])) {
        return nullptr;
      }
    }
    return arena;
  }

  // arenas are found by their base address; one that is alive owns its bytes, so a variable lying
  // at its offsets lies in it
  static void Remember(const std::shared_ptr<const Arena>& arena) {
    std::lock_guard<std::mutex> guard(arenas_lock_);
    for (auto it = arenas_.begin(); it != arenas_.end();) it = it->second.expired() ? arenas_.erase(it) : std::next(it);
    arenas_[arena->base()] = arena;
  }

  static std::mutex arenas_lock_;
  static std::map<const void*, std::weak_ptr<const Arena>> arenas_;

  int root_ = 0;
};

std::mutex NpuSimBroadcastVariablesOp::arenas_lock_;
std::map<const void*, std::weak_ptr<const Arena>> NpuSimBroadcastVariablesOp::arenas_;

REGISTER_KERNEL_BUILDER(Name("NpuSimBroadcastVariables").Device(DEVICE_CPU), NpuSimBroadcastVariablesOp);

// A tf.function that broadcasts a list of variables made eagerly captures one input, a VariableList
// made at tracing, instead of a handle per variable: TensorFlow's own cost of calling a function
// grows with its inputs (160 variable handles passed to one op: 0.34 ms on one process, up to
// ~1.5 ms in the 2-rank benchmark at 64 MB), which was most of what the broadcast cost over MPI_Bcast.
// The list holds its variables as a captured handle would: they live while the function does.
class VariableList : public ResourceBase {
 public:
  explicit VariableList(std::vector<core::RefCountPtr<Var>> variables) : variables_(std::move(variables)) {}
  std::string DebugString() const override { return strings::StrCat("NpuSimVariableList of ", variables_.size()); }
  const std::vector<core::RefCountPtr<Var>>& variables() const { return variables_; }

 private:
  std::vector<core::RefCountPtr<Var>> variables_;
};

REGISTER_OP("NpuSimVariableList")
    .Input("resources: N * resource")
    .Attr("N: int >= 1")
    .Output("list: resource")
    .SetIsStateful()
    .SetShapeFn(shape_inference::ScalarShape);

class NpuSimVariableListOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    std::vector<core::RefCountPtr<Var>> variables(context->num_inputs());
    for (int i = 0; i < context->num_inputs(); ++i) {
      OP_REQUIRES_OK(context, LookupResource(context, HandleFromInput(context, i), &variables[i]));
    }
    Tensor* handle = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &handle));
    handle->scalar<ResourceHandle>()() = ResourceHandle::MakeRefCountingHandle<VariableList>(
        new VariableList(std::move(variables)), context->device()->name());
  }
};

REGISTER_KERNEL_BUILDER(Name("NpuSimVariableList").Device(DEVICE_CPU), NpuSimVariableListOp);

REGISTER_OP("NpuSimBroadcastVariableList")
    .Input("list: resource")
    .Attr("root: int")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);

class NpuSimBroadcastVariableListOp : public NpuSimBroadcastVariablesOp {
 public:
  using NpuSimBroadcastVariablesOp::NpuSimBroadcastVariablesOp;

 protected:
  Status Variables(OpKernelContext* context, std::vector<core::RefCountPtr<Var>>* variables) override {
    core::RefCountPtr<VariableList> list;
    TF_RETURN_IF_ERROR(LookupResource(context, HandleFromInput(context, 0), &list));
    for (const auto& variable : list->variables()) {
      variable->Ref();
      variables->emplace_back(variable.get());
    }
    return OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("NpuSimBroadcastVariableList").Device(DEVICE_CPU), NpuSimBroadcastVariableListOp);
