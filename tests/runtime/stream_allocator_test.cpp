// The caching allocator under ABI 2.0's stream-ordered memory: a block is
// reused at once on the stream that last used it, and handed to another
// stream only after an event recorded on its stream has completed. Driven
// through an in-process plugin table whose events complete only when the
// test says so (core/src internals, as plugin_ops_test does).
#include "runtime/device/allocator.hpp"
#include "runtime/device/device_record.hpp"

#include <strata/error.hpp>

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace {

using strata::detail::DeviceRecord;
using strata::detail::LoadedPlugin;

/// A fake device: buffers are distinct integers; events complete on demand.
struct FakeDevice {
  uintptr_t next_buffer = 0x1000;
  std::set<uintptr_t> live;
  bool events_complete = false;
  int events_recorded = 0;
  std::vector<strata_stream> recorded_on;
};
FakeDevice g_fake;

strata_status fake_alloc(strata_alloc_args* a) {
  a->buffer = reinterpret_cast<strata_buffer>(g_fake.next_buffer);
  g_fake.live.insert(g_fake.next_buffer);
  g_fake.next_buffer += 0x1000;
  return STRATA_OK;
}
void fake_free(strata_alloc_args* a) { g_fake.live.erase(reinterpret_cast<uintptr_t>(a->buffer)); }
strata_status fake_copy(strata_copy_args*) { return STRATA_OK; }
strata_status fake_ok(strata_stream_args*) { return STRATA_OK; }
void fake_void(strata_stream_args*) {}
strata_status fake_event_create(strata_stream_args* a) {
  a->event = reinterpret_cast<strata_event>(static_cast<uintptr_t>(++g_fake.events_recorded));
  return STRATA_OK;
}
strata_status fake_event_record(strata_stream_args* a) {
  g_fake.recorded_on.push_back(a->stream);
  return STRATA_OK;
}
strata_status fake_event_query(strata_stream_args* a) {
  a->complete = g_fake.events_complete ? 1 : 0;
  return STRATA_OK;
}

strata_plugin_api fake_api() {
  strata_plugin_api api{};
  api.struct_size = sizeof(api);
  api.abi_major = STRATA_ABI_MAJOR;
  api.abi_minor = STRATA_ABI_MINOR;
  api.name = "fake";
  api.alloc = fake_alloc;
  api.free = fake_free;
  api.copy = fake_copy;
  api.stream_create = fake_ok;
  api.stream_destroy = fake_void;
  api.stream_synchronize = fake_ok;
  api.event_create = fake_event_create;
  api.event_destroy = fake_void;
  api.event_record = fake_event_record;
  api.stream_wait_event = fake_ok;
  api.event_synchronize = fake_ok;
  api.event_query = fake_event_query;
  return api;
}

class StreamAllocator : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = FakeDevice{};
    api_ = fake_api();
    plugin_.name = "fake";
    plugin_.api = &api_;
    device_ = std::make_unique<DeviceRecord>(plugin_, 0, 0);
    device_->id = "fake:0";
    device_->props.struct_size = sizeof(device_->props);
    device_->props.flags = STRATA_DEVICE_HAS_STREAMS;
    device_->has_streams = true;
  }
  strata_stream stream(uintptr_t id) { return reinterpret_cast<strata_stream>(id); }

  strata_plugin_api api_{};
  LoadedPlugin plugin_;
  std::unique_ptr<DeviceRecord> device_;
};

TEST_F(StreamAllocator, SameStreamReusesAtOnce) {
  size_t block = 0;
  strata_buffer a = device_->allocator.allocate(1000, &block, stream(1));
  device_->allocator.release(a, block, stream(1));
  EXPECT_EQ(device_->allocator.allocate(1000, &block, stream(1)), a);
  EXPECT_EQ(g_fake.events_recorded, 0) << "no event is needed within one stream";
}

TEST_F(StreamAllocator, AnotherStreamWaitsForTheEvent) {
  size_t block = 0;
  strata_buffer a = device_->allocator.allocate(1000, &block, stream(1));
  device_->allocator.release(a, block, stream(1));
  // Stream 2 must not get the block while stream 1 may still use it.
  strata_buffer b = device_->allocator.allocate(1000, &block, stream(2));
  EXPECT_NE(b, a);
  ASSERT_EQ(g_fake.recorded_on.size(), 1u);
  EXPECT_EQ(g_fake.recorded_on[0], stream(1)) << "the event is recorded on the block's own stream";
  EXPECT_EQ(device_->allocator.stats().device_allocations, 2u);
  // Once the event completes, the block moves to stream 2 without a new allocation.
  g_fake.events_complete = true;
  strata_buffer c = device_->allocator.allocate(1000, &block, stream(2));
  EXPECT_EQ(c, a);
  EXPECT_EQ(device_->allocator.stats().device_allocations, 2u);
  device_->allocator.release(b, block, stream(2));
  device_->allocator.release(c, block, stream(2));
  device_->allocator.empty_cache();
  EXPECT_TRUE(g_fake.live.empty()) << "every block went back to the plugin";
}

TEST_F(StreamAllocator, PluginThatCachesItselfGetsEveryFree) {
  device_->props.flags |= STRATA_DEVICE_CACHES_MEMORY;
  size_t block = 0;
  strata_buffer a = device_->allocator.allocate(1000, &block, stream(1));
  device_->allocator.release(a, block, stream(1));
  EXPECT_TRUE(g_fake.live.empty()) << "freed straight through: memory is never cached twice";
  EXPECT_EQ(device_->allocator.stats().cached_bytes, 0u);
}

}  // namespace
