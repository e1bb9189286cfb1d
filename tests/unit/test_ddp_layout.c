/* Data-parallel buckets and distributed-optimizer shards (no MPI: the layout of any DP rank is
 * built with ddp_create_layout), and the distributed optimizer at DP 1 against plain AdamW.
 *
 *  - buckets: whole tensors, contiguous, in backward order from the end of the buffer, each
 *    closed as soon as it reaches --ddp-bucket-size; one bucket without --overlap-grad-reduce
 *    or on a pipeline stage after the first; Megatron's default size max(40M, 1M x DP);
 *  - pieces: every bucket split over the DP ranks in rank order, sizes differing by at most 1,
 *    every rank's total floor(N/DP) or ceil(N/DP), the segments of all ranks covering the
 *    buffer exactly once, each inside one tensor;
 *  - the word embedding shared by pipeline stages has a bucket of its own, split the same way
 *    on the first and the last stage;
 *  - DP 1: dist_opt's grad norm, clipping and AdamW give the bits optimizer_* give. */
#include <stdint.h>
#include <string.h>

#include "core/distributed/distributed_data_parallel.h"
#include "core/optimizer/distrib_optimizer.h"
#include "core/optimizer/optimizer.h"
#include "core/tensor/memory.h"
#include "test_util.h"

/* A param_set of tensors of these sizes (names: "t<i>", or `first_name` for tensor 0, `last`
 * for the last one when given); buffers only when `buffers`. */
/* n tensors of the given sizes named t0, t1, ...; mark_first / mark_last: tensor 0 / n - 1
 * is marked as the word embedding (param_tensor.word_embedding) */
static param_set make_set(const size_t *sizes, int n, int mark_first, int mark_last,
                          int buffers) {
    param_set ps;
    memset(&ps, 0, sizeof(ps));
    ps.count = n;
    ps.tensors = calloc((size_t)n, sizeof(param_tensor));
    for (int i = 0; i < n; i++) {
        param_tensor *t = &ps.tensors[i];
        snprintf(t->name, sizeof(t->name), "t%d", i);
        t->word_embedding = (i == 0 && mark_first) || (i == n - 1 && mark_last);
        t->ndim = 1;
        t->shape[0] = t->full_shape[0] = (int64_t)sizes[i];
        t->numel = sizes[i];
        t->offset = ps.numel;
        t->weight_decay = i % 2;
        ps.numel += sizes[i];
    }
    if (buffers) {
        ps.data = mem_alloc_floats(MEM_PARAMS, ps.numel, "test params");
        ps.grad = mem_alloc_floats(MEM_GRADS, ps.numel, "test grads");
    }
    return ps;
}

static int is_boundary(const param_set *ps, size_t off) {
    if (off == ps->numel) return 1;
    for (int i = 0; i < ps->count; i++)
        if (ps->tensors[i].offset == off) return 1;
    return 0;
}

/* The tensor starting at off, or -1. */
static int tensor_at(const param_set *ps, size_t off) {
    for (int i = 0; i < ps->count; i++)
        if (ps->tensors[i].offset == off) return i;
    return -1;
}

static const size_t SIZES[] = {100, 7, 13, 50, 50, 3, 29, 64, 1, 40, 22};
#define NS ((int)(sizeof(SIZES) / sizeof(SIZES[0])))

static void check_buckets(const param_set *ps, const ddp *d, size_t bucket_size) {
    CHECK(d->num_buckets >= 1);
    CHECK(d->buckets[0].end == ps->numel);
    CHECK(d->buckets[d->num_buckets - 1].begin == 0);
    for (int b = 0; b < d->num_buckets; b++) {
        const ddp_bucket *bk = &d->buckets[b];
        CHECK(bk->begin < bk->end);
        CHECK(is_boundary(ps, bk->begin) && is_boundary(ps, bk->end));
        if (b + 1 < d->num_buckets) {
            CHECK(d->buckets[b + 1].end == bk->begin);
            /* closed as soon as it reached the size: without its first (lowest) tensor it was
             * still below */
            size_t n = bk->end - bk->begin;
            int first = tensor_at(ps, bk->begin);
            CHECK(n >= bucket_size);
            CHECK(first >= 0 && n - ps->tensors[first].numel < bucket_size);
        }
    }
}

static void test_buckets(void) {
    param_set ps = make_set(SIZES, NS, 0, 0, 0);
    /* no overlap: one bucket whatever --ddp-bucket-size says (Megatron: bucket_size = None) */
    ddp_config c = {.overlap_grad_reduce = 0, .bucket_size = 30};
    ddp *d = ddp_create_layout(&ps, &c, 2, 0, 1, 0);
    CHECK(d->num_buckets == 1 && d->buckets[0].begin == 0 && d->buckets[0].end == ps.numel);
    ddp_free(d);
    /* overlap: buckets of at least 30, 60, 100 elements */
    size_t sizes[] = {1, 30, 60, 100, 1000};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        c = (ddp_config){.overlap_grad_reduce = 1, .bucket_size = (int64_t)sizes[k]};
        d = ddp_create_layout(&ps, &c, 2, 1, 1, 0);
        check_buckets(&ps, d, sizes[k]);
        if (sizes[k] == 1) CHECK(d->num_buckets == NS); /* one tensor each */
        if (sizes[k] == 1000) CHECK(d->num_buckets == 1);
        ddp_free(d);
    }
    /* Megatron's default: max(40M, 1M x DP) */
    c = (ddp_config){.overlap_grad_reduce = 1};
    d = ddp_create_layout(&ps, &c, 64, 0, 1, 0);
    CHECK(d->bucket_size == 64000000 && d->num_buckets == 1);
    ddp_free(d);
    d = ddp_create_layout(&ps, &c, 8, 0, 1, 0);
    CHECK(d->bucket_size == 40000000);
    ddp_free(d);
    /* a pipeline stage after the first does not bucket */
    c = (ddp_config){.overlap_grad_reduce = 1, .bucket_size = 30};
    d = ddp_create_layout(&ps, &c, 2, 0, 2, 1);
    CHECK(d->num_buckets == 1);
    ddp_free(d);
    free(ps.tensors);
}

static void test_pieces(void) {
    param_set ps = make_set(SIZES, NS, 0, 0, 1);
    int64_t bucket_sizes[] = {0, 1, 25, 60};
    for (int overlap = 0; overlap < 2; overlap++)
        for (size_t k = 0; k < sizeof(bucket_sizes) / sizeof(bucket_sizes[0]); k++)
            for (int dp = 1; dp <= 5; dp++) {
                ddp_config c = {.overlap_grad_reduce = overlap, .use_distributed_optimizer = 1,
                                .bucket_size = bucket_sizes[k]};
                unsigned char *owned = calloc(ps.numel, 1);
                for (int r = 0; r < dp; r++) {
                    ddp *d = ddp_create_layout(&ps, &c, dp, r, 1, 0);
                    size_t total = 0;
                    for (int b = 0; b < d->num_buckets; b++) {
                        const ddp_bucket *bk = &d->buckets[b];
                        size_t n = bk->end - bk->begin, sum = 0;
                        for (int q = 0; q < dp; q++) {
                            CHECK((size_t)bk->counts[q] == n / dp ||
                                  (size_t)bk->counts[q] == n / dp + 1);
                            CHECK(bk->displs[q] == (int)sum);
                            sum += (size_t)bk->counts[q];
                        }
                        CHECK(sum == n);
                        total += ddp_piece_numel(d, b);
                    }
                    CHECK(total == ps.numel / dp || total == (ps.numel + dp - 1) / dp);
                    dist_opt *o = dist_opt_create(&ps, d, HALF_NONE);
                    CHECK(o->shard_numel == (ps.numel + dp - 1) / dp);
                    size_t seg_total = 0;
                    for (int s = 0; s < o->num_segments; s++) {
                        const dist_opt_segment *sg = &o->segs[s];
                        const param_tensor *t = &ps.tensors[sg->tensor];
                        CHECK(sg->begin >= t->offset && sg->begin + sg->numel <= t->offset + t->numel);
                        CHECK(sg->state == seg_total);
                        for (size_t i = sg->begin; i < sg->begin + sg->numel; i++) owned[i]++;
                        seg_total += sg->numel;
                    }
                    CHECK(seg_total == total);
                    dist_opt_free(o);
                    ddp_free(d);
                }
                int once = 1;
                for (size_t i = 0; i < ps.numel; i++) once &= owned[i] == 1;
                CHECK(once);
                free(owned);
            }
    mem_free(ps.data);
    mem_free(ps.grad);
    free(ps.tensors);
}

/* The tied word embedding on the first stage (tensor 0) and the last stage's copy (last
 * tensor): a bucket of its own, split alike, whatever else the stages hold. */
static void test_shared_embedding(void) {
    size_t first[] = {101, 13, 50, 7}, last[] = {29, 3, 64, 9, 101};
    param_set a = make_set(first, 4, 1, 0, 0), b = make_set(last, 5, 0, 1, 0);
    for (int dp = 2; dp <= 4; dp++)
        for (int r = 0; r < dp; r++) {
            ddp_config c = {.overlap_grad_reduce = 1, .use_distributed_optimizer = 1,
                            .bucket_size = 40};
            ddp *da = ddp_create_layout(&a, &c, dp, r, 2, 0);
            ddp *db = ddp_create_layout(&b, &c, dp, r, 2, 1);
            const ddp_bucket *ea = &da->buckets[da->num_buckets - 1], *eb = &db->buckets[0];
            CHECK(ea->begin == 0 && ea->end == 101);
            CHECK(eb->begin == b.numel - 101 && eb->end == b.numel);
            CHECK(db->num_buckets == 2); /* the later stage: the rest in one bucket */
            for (int q = 0; q < dp; q++)
                CHECK(ea->counts[q] == eb->counts[q] && ea->displs[q] == eb->displs[q]);
            ddp_free(da);
            ddp_free(db);
            /* without the distributed optimizer, no special bucket */
            c.use_distributed_optimizer = 0;
            da = ddp_create_layout(&a, &c, dp, r, 2, 0);
            CHECK(da->buckets[da->num_buckets - 1].end != 101);
            ddp_free(da);
        }
    /* the mark, not the name, makes the tensor the embedding: named as Megatron names it but
     * unmarked, it shares a bucket */
    param_set u = make_set(first, 4, 0, 0, 0);
    snprintf(u.tensors[0].name, sizeof u.tensors[0].name, "embedding.word_embeddings.weight");
    ddp_config c = {.overlap_grad_reduce = 1, .use_distributed_optimizer = 1, .bucket_size = 40};
    ddp *du = ddp_create_layout(&u, &c, 2, 0, 2, 0);
    CHECK(du->buckets[du->num_buckets - 1].end != 101);
    ddp_free(du);
    free(u.tensors);
    free(a.tensors);
    free(b.tensors);
}

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) - 0.5f;
}

/* DP 1: the distributed optimizer is plain AdamW, bit for bit. */
static void test_dp1_equals_adamw(void) {
    param_set p = make_set(SIZES, NS, 0, 0, 1), q = make_set(SIZES, NS, 0, 0, 1);
    p.exp_avg = mem_alloc_floats(MEM_OPTIMIZER, p.numel, "test exp_avg");
    p.exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, p.numel, "test exp_avg_sq");
    for (size_t i = 0; i < p.numel; i++) p.data[i] = q.data[i] = rnd();
    ddp_config c = {.overlap_grad_reduce = 1, .use_distributed_optimizer = 1, .bucket_size = 40};
    ddp *d = ddp_create_layout(&q, &c, 1, 0, 1, 0);
    dist_opt *o = dist_opt_create(&q, d, HALF_NONE);
    optimizer_config oc = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    int same = 1;
    for (int step = 1; step <= 4; step++) {
        for (size_t i = 0; i < p.numel; i++) p.grad[i] = q.grad[i] = rnd() * (float)step;
        float n1 = optimizer_grad_norm(&p), n2 = dist_opt_grad_norm(o);
        CHECK_CLOSE(n2, n1, 1e-6, 0);
        optimizer_clip_grads(&p, n1, 0.5f);
        dist_opt_clip_grads(o, n1, 0.5f);
        optimizer_step(&p, &oc, 1e-2f, step, HALF_NONE);
        dist_opt_step(o, &oc, 1e-2f, step);
        same &= memcmp(p.data, q.data, p.numel * sizeof(float)) == 0;
    }
    CHECK(same);
    /* every piece of the sharded state is plain AdamW's at its place in the whole buffer, and
     * the pieces cover it (DP 1: one rank owns everything) */
    size_t covered = 0;
    for (int s = 0; s < o->num_segments; s++) {
        const dist_opt_segment *sg = &o->segs[s];
        CHECK(memcmp(o->exp_avg + sg->state, p.exp_avg + sg->begin, sg->numel * sizeof(float)) == 0);
        CHECK(memcmp(o->exp_avg_sq + sg->state, p.exp_avg_sq + sg->begin,
                     sg->numel * sizeof(float)) == 0);
        covered += sg->numel;
    }
    CHECK(covered == p.numel && q.exp_avg == NULL);
    dist_opt_free(o);
    ddp_free(d);
    param_set *sets[2] = {&p, &q};
    for (int k = 0; k < 2; k++) {
        mem_free(sets[k]->data);
        mem_free(sets[k]->grad);
        mem_free(sets[k]->exp_avg);
        mem_free(sets[k]->exp_avg_sq);
        free(sets[k]->tensors);
    }
}

int main(void) {
    test_buckets();
    test_pieces();
    test_shared_embedding();
    test_dp1_equals_adamw();
    TEST_DONE();
}
