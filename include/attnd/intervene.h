/* intervene.h - interventions: per-request changes to what the model computes, named after
 * TransformerLens' hook points, applied by the CPU forward pass (forward_cpu.c) to one
 * sequence's rows of a step while the other sequences of the same step run plain.
 *
 * Kinds (layer L, head H, model width d):
 *   head_scale {L, H, scale}   hook_z: head H's attention output z (after attention, before W_O)
 *                              times scale (0: zero ablation)
 *   head_mean  {L, H}          hook_z: z replaced by its mean over the request's prompt positions,
 *                              computed in the prompt pass (which must be one step: see below) and
 *                              kept for the generated positions
 *   steer      {L, vector (d), scale, positions}
 *                              hook_resid_pre: scale * vector added to layer L's input at the
 *                              positions "all", "generated" (position >= the prompt's length) or
 *                              a list of positions
 *   skip       {L, part}       "attn" / "mlp": that sub-block's output is not added; "residual":
 *                              the layer's output replaces the stream instead of being added to it
 *                              (resid_post = attn_out + mlp_out; the MLP still reads
 *                              resid_pre + attn_out)
 *   patch      {site, L, head?, position, vector (site's width)}
 *                              hook_<site>: the site's value at one position replaced by the
 *                              vector (activation patching; z with a head: that head's slice), after
 *                              the other interventions at that hook
 * Several interventions apply in list order where they meet at one hook (patches last).
 *
 * head_mean needs every prompt row in one step: the scheduler refuses it for a prompt longer
 * than its step budget, runs the prompt as one chunk, and never shares its KV blocks (the mean
 * depends on the whole prompt). Everything else may share prefix blocks with a request whose
 * interventions are identical (iv_fingerprint), never with others.
 *
 * An iv_set is owned by one request (iv_clone for another); the forward pass writes head_mean's
 * means into it. Not thread-safe. Nothing here prints or exits. */
#ifndef ATTND_INTERVENE_H
#define ATTND_INTERVENE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct cJSON;
struct model;
struct model_hparams;

#define IV_MAX 256         /* interventions per request */
#define IV_MAX_SCALE 1e4   /* |scale| at most this */

enum iv_kind { IV_HEAD_SCALE = 0, IV_HEAD_MEAN, IV_STEER, IV_SKIP, IV_PATCH };
enum iv_part { IV_PART_ATTN = 0, IV_PART_MLP, IV_PART_RESIDUAL };
enum iv_where { IV_POS_ALL = 0, IV_POS_GENERATED, IV_POS_LIST };

/* The hook points a layer's interventions use (iv_layer_hooks). */
enum {
    IV_AT_RESID_PRE = 1, /* steer */
    IV_AT_Z = 2,         /* head_scale, head_mean */
    IV_AT_ATTN_OUT = 4,  /* skip attn, skip residual (saves attn_out) */
    IV_AT_MLP_OUT = 8,   /* skip mlp, skip residual */
    IV_AT_RESID_POST = 16, /* captures only */
};

/* Where an activation can be captured (POST /v1/activations), TransformerLens' names: each is the
 * value the model goes on with, after the interventions at that point. */
enum iv_site {
    IV_SITE_RESID_PRE = 0, /* a layer's input stream (after steering), d wide */
    IV_SITE_RESID_POST,    /* its output stream, d */
    IV_SITE_ATTN_OUT,      /* the attention block's output z·Woᵀ (0 if skipped), d */
    IV_SITE_MLP_OUT,       /* the MLP's output (0 if skipped), d */
    IV_SITE_Z,             /* the heads' attention outputs before W_O: n_head * head_dim, or one head's */
};

/* A capture: rows of one site copied out as a step computes them. */
struct iv_capture {
    enum iv_site site;
    int layer;
    int head;     /* IV_SITE_Z: one head, or -1 for all of them */
    size_t width; /* floats per position (iv_site_width) */
    float *out;   /* (n_pos - first, width): position p in row p - first; the caller's buffer,
                     outliving the request */
    size_t first; /* positions below this are not copied */
    size_t n_pos; /* positions at and past this are not copied */
};

struct fwd_intervention {
    enum iv_kind kind;
    int layer;           /* 0..n_layer-1 */
    int head;            /* head_scale, head_mean: 0..n_head-1; patch: z's head or -1 */
    float scale;         /* head_scale, steer */
    enum iv_part part;   /* skip */
    enum iv_where where; /* steer */
    int32_t *positions;  /* steer, IV_POS_LIST: sorted, distinct */
    int n_positions;
    float *vector;       /* steer: (n_embd); patch: (width) */
    enum iv_site site;   /* patch */
    int32_t position;    /* patch */
    size_t width;        /* patch: iv_site_width of site and head */
};

struct iv_set {
    struct fwd_intervention *items; /* (n) */
    int n;
    int n_embd, n_layer, n_head, head_dim; /* the model the set was made for */
    size_t n_prompt;     /* positions below this are the prompt (the scheduler sets it) */
    uint64_t fingerprint; /* iv_fingerprint of the items (never 0) */
    float *means;        /* (n, head_dim) head_mean items' means of z */
    bool *mean_ready;    /* (n) the mean holds every prompt row */
    uint8_t *hooks;      /* (n_layer) IV_AT_* bits used at each layer */
    struct iv_capture *caps; /* (n_caps) captures (iv_add_capture) */
    int n_caps;
};

/* An empty set for a model of hyperparameters hp (no interventions), for captures. */
attnd_status iv_create(const struct model_hparams *hp, struct iv_set **out);
/* "resid_pre", "resid_post", "attn_out", "mlp_out", "z" -> *out; -1 for anything else. */
int iv_site_parse(const char *name, enum iv_site *out);
const char *iv_site_name(enum iv_site site);
/* Floats per position of a site (head: IV_SITE_Z's one head, or -1). */
size_t iv_site_width(const struct model_hparams *hp, enum iv_site site, int head);
/* Adds a capture of site at layer (and head for IV_SITE_Z, or -1) into out (n_pos rows of
 * iv_site_width floats, owned by the caller and kept until the request's last event). A set with
 * captures computes every position itself (iv_own_blocks). Returns ATTND_ERR_INVALID for a bad
 * layer or head, ATTND_ERR_NOMEM. */
attnd_status iv_add_capture(struct iv_set *s, enum iv_site site, int layer, int head, float *out, size_t n_pos);
/* Adds a capture of one position only (pos) into out (iv_site_width floats). Same returns. */
attnd_status iv_add_capture_at(struct iv_set *s, enum iv_site site, int layer, int head, float *out, size_t pos);
/* Appends a patch (activation patching): site at layer (head for IV_SITE_Z, or -1) at position
 * pos replaced by vals (iv_site_width floats, copied). The set's hooks and fingerprint follow.
 * Returns ATTND_ERR_INVALID for a bad site, layer or head, ATTND_ERR_NOMEM. */
attnd_status iv_add_patch(struct iv_set *s, enum iv_site site, int layer, int head, int32_t pos, const float *vals);
/* Row `token` of the model's output matrix (the unembedding; n_embd floats, dequantized) into
 * out; the logit of token is out · (RMSNorm(resid) * output_norm). ATTND_ERR_INVALID for a bad
 * token. */
attnd_status iv_output_row(const struct model *m, int token, float *out);

/* The prefix-cache key of a request with this set (n_prompt set; 0 for NULL): the fingerprint,
 * mixed with n_prompt when a steer acts on generated positions only (the same tokens may be
 * generated in one request and prompt in another, computed differently). */
uint64_t iv_kv_key(const struct iv_set *s);
/* 1 if a sequence with this set must compute all its positions and share no KV block (head_mean:
 * the mean depends on the whole prompt; captures: every position is copied out). */
int iv_own_blocks(const struct iv_set *s);
/* The captures of site at layer l over n rows (stride floats apart, row i at position pos[i]). */
void iv_capture(const struct iv_set *s, enum iv_site site, int l, const float *rows, size_t stride,
                const int32_t *pos, int n);

/* Parses a JSON array of interventions (the API's "interventions" field, `attnd run
 * --intervene`'s file) for a model with hyperparameters hp and a context of n_ctx positions.
 * Returns ATTND_OK and a new set in *out (NULL for an empty array); ATTND_ERR_INVALID with a
 * message naming the field path ("interventions[3].head: ...", prefix is "interventions") in
 * err; ATTND_ERR_NOMEM. */
attnd_status iv_parse_json(const struct cJSON *arr, const struct model_hparams *hp, int n_ctx, const char *prefix,
                           struct iv_set **out, char *err, size_t errlen);

/* A copy of s (its means not computed yet) in *out; ATTND_ERR_NOMEM. iv_clone(NULL) gives NULL. */
attnd_status iv_clone(const struct iv_set *s, struct iv_set **out);
/* iv_destroy(NULL) is a no-op. */
void iv_destroy(struct iv_set *s);

/* 1 if the set was made for a model of these dimensions. */
int iv_matches(const struct iv_set *s, const struct model_hparams *hp);
/* 1 if any item is head_mean. */
int iv_has_head_mean(const struct iv_set *s);
/* 1 if every head_mean item's mean holds the whole prompt (1 without head_mean). */
int iv_means_ready(const struct iv_set *s);
/* The IV_AT_* bits of layer l (0 for a NULL set). */
unsigned iv_layer_hooks(const struct iv_set *s, int l);
/* 1 if a skip of `part` is set at layer l. */
int iv_skips(const struct iv_set *s, int l, enum iv_part part);

/* hook_resid_pre of layer l: adds the steering vectors to n rows of x (d floats each, row i at
 * position pos[i]). */
void iv_apply_resid_pre(const struct iv_set *s, int l, float *x, const int32_t *pos, int n);
/* hook_z of layer l: n rows of z (stride floats apart, head h at h * head_dim), row i at
 * position pos[i]. head_mean: the rows below n_prompt set its mean first if not yet complete. */
void iv_apply_z(struct iv_set *s, int l, float *z, size_t stride, const int32_t *pos, int n);
/* The patches of site at layer l on n rows (stride floats apart, row i at position pos[i]);
 * iv_apply_resid_pre and iv_apply_z call it for their sites, the forward pass for attn_out,
 * mlp_out and resid_post. */
void iv_apply_patch(const struct iv_set *s, enum iv_site site, int l, float *rows, size_t stride, const int32_t *pos,
                    int n);

#endif
