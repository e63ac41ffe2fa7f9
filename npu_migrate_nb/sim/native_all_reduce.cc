// The simulator's all-reduce as a TensorFlow kernel: what comm.all_reduce does in a graph, without
// the numpy_function round trip (the GIL, a Python call, numpy conversions) at every training step.
//
// Same contract as comm.allreduce_arrays: the call's tensors (one dtype) are fused into one buffer,
// a descriptor (kind, op, root, bytes, shape signature, sequence) is all-gathered first and every
// rank fails with the same message when ranks disagree, one MPI_Allreduce carries the data, and
// float32 results are multiplied by `scale` and divided by `divisor` afterwards (a float attr is 32-bit:
// float64 tensors stay on the numpy path, whose scale is exact in their precision).
//
// MPI is not linked: comm.py hands over MPI_Allreduce/MPI_Allgather and the communicator, datatype
// and op handles of the process's mpi4py (MPICH ABI: int handles). The MPI lock, the sequence
// counter and "which collective am I in" live here and are shared with the Python paths through
// the extern "C" functions below, so the two paths stay one ordered stream of collectives.

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

namespace {

typedef int (*AllreduceFn)(const void*, void*, int, int, int, int);
typedef int (*AllgatherFn)(const void*, int, int, void*, int, int, int);

struct Mpi {
  AllreduceFn allreduce = nullptr;
  AllgatherFn allgather = nullptr;
  int comm = 0, int64_type = 0, float_type = 0, int32_type = 0;
  int sum = 0, max = 0, min = 0, prod = 0;
  int size = 1;
};

Mpi g_mpi;
std::mutex g_lock;                        // MPI calls never overlap (comm._mpi_lock's twin)
std::atomic<int64_t> g_sequence{0};       // one counter for every collective of the process
std::atomic<int64_t> g_current{-1};       // sequence of the native collective in progress, or -1
std::atomic<int64_t> g_current_since_ns{0};
std::atomic<int> g_aborted{0};
std::atomic<int64_t> g_completed{0};

const int kAllReduce = 1;                 // comm._KIND_CODES["all_reduce"]

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint32_t Crc32(const std::string& text) {  // zlib.crc32
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : text) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

// comm._signature: ";".join(f"{a.dtype.str}{a.shape}" for a in arrays), e.g. "<f4(32, 64);<f4(64,)"
std::string ShapeText(const TensorShape& shape) {
  std::ostringstream out;
  out << "(";
  for (int d = 0; d < shape.dims(); ++d) out << (d ? ", " : "") << shape.dim_size(d);
  out << (shape.dims() == 1 ? ",)" : ")");
  return out.str();
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

void npu_sim_configure(void* allreduce, void* allgather, int size, int comm, int int64_type, int float_type,
                       int int32_type, int sum, int max, int min, int prod) {
  g_mpi.allreduce = reinterpret_cast<AllreduceFn>(allreduce);
  g_mpi.allgather = reinterpret_cast<AllgatherFn>(allgather);
  g_mpi.comm = comm;
  g_mpi.size = size;
  g_mpi.int64_type = int64_type;
  g_mpi.float_type = float_type;
  g_mpi.int32_type = int32_type;
  g_mpi.sum = sum;
  g_mpi.max = max;
  g_mpi.min = min;
  g_mpi.prod = prod;
}

void npu_sim_lock() { g_lock.lock(); }
void npu_sim_unlock() { g_lock.unlock(); }
int64_t npu_sim_next_sequence() { return g_sequence.fetch_add(1); }
int64_t npu_sim_current() { return g_current.load(); }
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

    int64_t count = 0;
    std::string signature;
    for (int i = 0; i < values.size(); ++i) {
      count += values[i].NumElements();
      signature += (i ? ";" : "") + std::string(DtypeStr<T>()) + ShapeText(values[i].shape());
    }
    OP_REQUIRES(context, count <= INT32_MAX, errors::InvalidArgument("all_reduce of over 2**31 elements"));
    // TensorFlow's allocator: aligned, reused between steps, not zero-filled.
    Tensor send_buffer, receive_buffer;
    OP_REQUIRES_OK(context, context->allocate_temp(DataTypeToEnum<T>::value, TensorShape({count}), &send_buffer));
    OP_REQUIRES_OK(context, context->allocate_temp(DataTypeToEnum<T>::value, TensorShape({count}), &receive_buffer));
    T* send = send_buffer.flat<T>().data();
    T* receive = receive_buffer.flat<T>().data();
    int64_t offset = 0;
    for (int i = 0; i < values.size(); ++i) {
      auto flat = values[i].flat<T>();
      std::memcpy(send + offset, flat.data(), flat.size() * sizeof(T));
      offset += flat.size();
    }

    OP_REQUIRES_OK(context, Exchange(send, receive, count, Crc32(signature)));

    const bool floating = std::is_floating_point<T>::value;
    offset = 0;
    for (int i = 0; i < values.size(); ++i) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK(context, reduced.allocate(i, values[i].shape(), &out));
      auto flat = out->flat<T>();
      for (int64_t j = 0; j < flat.size(); ++j) {
        T value = receive[offset + j];
        if (floating) {
          if (scale_ != 1.0f) value = value * static_cast<T>(scale_);
          if (divisor_ != 1.0f) value = value / static_cast<T>(divisor_);
        }
        flat(j) = value;
      }
      offset += flat.size();
    }
  }

 private:
  Status Exchange(const T* send, T* receive, int64_t count, int64_t signature) {
    std::lock_guard<std::mutex> guard(g_lock);
    int64_t sequence = g_sequence.fetch_add(1);
    g_current_since_ns.store(MonotonicNs());
    g_current.store(sequence);
    struct Done { ~Done() { g_current.store(-1); g_completed.fetch_add(1); } } done;

    int64_t mine[6] = {kAllReduce, op_code_, 0, static_cast<int64_t>(count * sizeof(T)), signature, sequence};
    std::vector<int64_t> everyone(6 * g_mpi.size);
    if (g_mpi.allgather(mine, 6, g_mpi.int64_type, everyone.data(), 6, g_mpi.int64_type, g_mpi.comm) != 0) {
      return errors::Internal("MPI_Allgather failed");
    }
    bool agree = true;
    for (int r = 0; r < g_mpi.size && agree; ++r) {
      for (int k = 0; k < 5; ++k) agree = agree && everyone[6 * r + k] == mine[k];
    }
    if (!agree) {
      std::ostringstream lines;
      for (int r = 0; r < g_mpi.size; ++r) {
        lines << (r ? "; " : "") << "rank " << r << ": " << Describe(&everyone[6 * r]);
      }
      return errors::InvalidArgument("ranks reached different collectives: ", lines.str());
    }
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
