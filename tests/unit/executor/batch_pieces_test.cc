// Batches larger than a pass, in pieces: every logit row's logits, sampling parameters and
// drawn token go with that row whatever order the logit rows are listed in; and the checks of
// forward_sampled's arguments.
#include "executor/batch_pieces.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "executor/batch_validation.h"

namespace llamaserve {
namespace {

// 11 rows of one sequence at positions 0..10, logits wanted for rows 9, 2, 10 and 4.
Batch eleven_rows() {
  Batch b;
  for (int32_t r = 0; r < 11; ++r) {
    b.tokens.push_back(100 + r);
    b.positions.push_back(r);
    b.seq_index.push_back(0);
  }
  b.blocks_per_seq = 1;
  b.block_tables = {0};
  b.seq_lengths = {11};
  b.logit_rows = {9, 2, 10, 4};
  return b;
}

TEST(BatchPiecesTest, LogitsSamplingAndTokensFollowTheirRows) {
  const Batch batch = eleven_rows();
  constexpr int64_t kVocab = 3;
  std::vector<float> logits(batch.logit_rows.size() * kVocab, -1.0f);
  std::vector<RowSampling> sampling(batch.logit_rows.size());
  for (size_t i = 0; i < sampling.size(); ++i) sampling[i].seed = 1000 + batch.logit_rows[i];
  std::vector<int32_t> tokens(batch.logit_rows.size(), -1);
  PieceScratch scratch;
  std::vector<int32_t> piece_sizes;
  const Status status = run_in_pieces(batch, 4, kVocab, PassOutputs{logits, sampling, tokens},
                                      scratch, [&](const Batch& piece, const PassOutputs& out) {
                                        piece_sizes.push_back(piece.n_tokens());
                                        EXPECT_EQ(out.sampling.size(), piece.logit_rows.size());
                                        EXPECT_EQ(out.tokens.size(), piece.logit_rows.size());
                                        for (size_t i = 0; i < piece.logit_rows.size(); ++i) {
                                          // The piece's token at that row tells which batch row it
                                          // is.
                                          const int32_t row =
                                              piece.tokens[piece.logit_rows[i]] - 100;
                                          EXPECT_EQ(out.sampling[i].seed, 1000u + row);
                                          out.tokens[i] = 500 + row;
                                          for (int64_t v = 0; v < kVocab; ++v)
                                            out.logits[i * kVocab + v] = 10.0f * row + v;
                                        }
                                        return Status::ok();
                                      });
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(piece_sizes, (std::vector<int32_t>{4, 4, 3}));
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    const int32_t row = batch.logit_rows[i];
    EXPECT_EQ(tokens[i], 500 + row) << "logit row " << i;
    for (int64_t v = 0; v < kVocab; ++v) EXPECT_EQ(logits[i * kVocab + v], 10.0f * row + v);
  }

  // Without sampling the pieces get none, and a batch that fits runs whole.
  int calls = 0;
  ASSERT_TRUE(run_in_pieces(batch, 16, kVocab, logits, scratch,
                            [&](const Batch& piece, std::span<float> piece_logits) {
                              ++calls;
                              EXPECT_EQ(&piece, &batch);
                              EXPECT_EQ(piece_logits.size(), logits.size());
                              return Status::ok();
                            })
                  .is_ok());
  EXPECT_EQ(calls, 1);
}

TEST(BatchPiecesTest, ValidateSamplingWantsOneEntryPerLogitRowAndFiniteParameters) {
  const Batch batch = eleven_rows();
  std::vector<RowSampling> sampling(4);
  std::vector<int32_t> tokens(4);
  EXPECT_TRUE(validate_sampling(batch, sampling, tokens).is_ok());
  std::vector<int32_t> three(3);
  EXPECT_EQ(validate_sampling(batch, sampling, three).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      validate_sampling(batch, std::span<const RowSampling>(sampling).first(3), tokens).code(),
      StatusCode::kInvalidArgument);
  sampling[2].top_p = std::numeric_limits<float>::quiet_NaN();
  const Status nan = validate_sampling(batch, sampling, tokens);
  EXPECT_EQ(nan.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.message().find("logit row 2"), std::string::npos) << nan.message();
  sampling[2].top_p = 1.0f;
  sampling[1].temperature = std::numeric_limits<float>::infinity();
  EXPECT_EQ(validate_sampling(batch, sampling, tokens).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llamaserve
