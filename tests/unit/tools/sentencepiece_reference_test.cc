// The tokenizer.model reader against the SentencePiece library itself.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>

#include "model/importers/sentencepiece_model.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

TEST(SentencePieceReferenceTest, PiecesScoresTypesAndIdsMatchTheLibrary) {
  const std::string path = (tools_test::kFixtures / "llama2-tokenizer.model").string();
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(path).ok());
  auto model = read_sentencepiece_model(path);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ASSERT_EQ(static_cast<int>(model->pieces.size()), sp.GetPieceSize());
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    ASSERT_EQ(model->pieces[id], sp.IdToPiece(id)) << id;
    ASSERT_EQ(model->scores[id], sp.GetScore(id)) << id;
    const int type = model->types[id];
    ASSERT_EQ(type == 2, sp.IsUnknown(id)) << id;
    ASSERT_EQ(type == 3, sp.IsControl(id)) << id;
    ASSERT_EQ(type == 5, sp.IsUnused(id)) << id;
    ASSERT_EQ(type == 6, sp.IsByte(id)) << id;
  }
  EXPECT_EQ(model->unk_id, sp.unk_id());
  EXPECT_EQ(model->bos_id, sp.bos_id());
  EXPECT_EQ(model->eos_id, sp.eos_id());
  EXPECT_EQ(model->pad_id, sp.pad_id());
}

}  // namespace
}  // namespace llamaserve
