#include <gtest/gtest.h>
TEST(Mirror, Placeholder) {}
