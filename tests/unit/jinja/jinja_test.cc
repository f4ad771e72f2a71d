#include <gtest/gtest.h>

TEST(Jinja, Placeholder) {}
