// Process groups and collectives over MLX's distributed layer (ring, MPI, NCCL).
#include "shim_internal.h"

struct rlx_mlx_group {
  mx::distributed::Group group;
};

namespace {

const char* transport_name(rlx_mlx_transport transport) {
  switch (transport) {
    case RLX_MLX_TRANSPORT_RING:
      return "ring";
    case RLX_MLX_TRANSPORT_MPI:
      return "mpi";
    case RLX_MLX_TRANSPORT_NCCL:
      return "nccl";
  }
  throw std::invalid_argument("[rlx] unknown transport code");
}

const mx::distributed::Group& group_of(const rlx_mlx_group* g) {
  if (g == nullptr) {
    throw std::invalid_argument("[rlx] a required group handle is NULL");
  }
  return g->group;
}

}  // namespace

using namespace rlx;

extern "C" {

bool rlx_mlx_transport_available(rlx_mlx_transport transport) {
  try {
    return mx::distributed::is_available(transport_name(transport));
  } catch (...) {
    return false;
  }
}

int rlx_mlx_group_init(rlx_mlx_transport transport, rlx_mlx_group** out) {
  return guard([&] {
    if (out == nullptr) {
      throw std::invalid_argument("[rlx] output pointer is NULL");
    }
    const char* name = transport_name(transport);
    if (!mx::distributed::is_available(name)) {
      throw std::runtime_error(std::string("[rlx] this MLX build has no ") + name + " transport");
    }
    mx::distributed::Group g = mx::distributed::init(true, name);
    *out = new rlx_mlx_group{std::move(g)};
  });
}

void rlx_mlx_group_free(rlx_mlx_group* g) { delete g; }

int rlx_mlx_group_rank(const rlx_mlx_group* g, int32_t* rank, int32_t* size) {
  return guard([&] {
    if (rank == nullptr || size == nullptr) {
      throw std::invalid_argument("[rlx] output pointer is NULL");
    }
    *rank = group_of(g).rank();
    *size = group_of(g).size();
  });
}

int rlx_mlx_all_sum(const rlx_mlx_group* g, const rlx_mlx_array* x, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::distributed::all_sum(get(x), group_of(g))); });
}

int rlx_mlx_all_gather(const rlx_mlx_group* g, const rlx_mlx_array* x, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::distributed::all_gather(get(x), group_of(g))); });
}

int rlx_mlx_send(const rlx_mlx_group* g, const rlx_mlx_array* x, int32_t dst,
                 rlx_mlx_array** out) {
  return guard([&] { put(out, mx::distributed::send(get(x), dst, group_of(g))); });
}

int rlx_mlx_recv(const rlx_mlx_group* g, const int64_t* shape, size_t ndim, rlx_mlx_dtype dtype,
                 int32_t src, rlx_mlx_array** out) {
  return guard([&] {
    put(out, mx::distributed::recv(shape_of(shape, ndim), dtype_of(dtype), src, group_of(g)));
  });
}


}  // extern "C"
